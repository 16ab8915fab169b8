"""A protoc plugin (buf `local:` plugin) that runs grpcio-tools' own gRPC Python generator.

buf's `protoc_builtin:` only knows protoc's built-in generators (python, pyi, ...), and
grpcio-tools ships its gRPC generator inside its bundled protoc rather than as a plugin
executable. This script reads the CodeGeneratorRequest buf sends on stdin, writes the request's
files as a FileDescriptorSet, runs `grpc_tools.protoc --descriptor_set_in=... --grpc_python_out=...`
on the files to generate, and answers with a CodeGeneratorResponse holding the generated files.
The output is exactly what that grpcio-tools version generates (no timestamps, no paths).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def main() -> int:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    response = plugin_pb2.CodeGeneratorResponse()
    response.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    with tempfile.TemporaryDirectory(prefix="protoc-gen-grpc-python-") as tmp:
        fds = descriptor_pb2.FileDescriptorSet(file=request.proto_file)
        descriptors = Path(tmp) / "request.binpb"
        descriptors.write_bytes(fds.SerializeToString())
        out = Path(tmp) / "out"
        out.mkdir()
        option = f"{request.parameter}:" if request.parameter else ""
        args = [
            "grpc_tools.protoc",
            f"--descriptor_set_in={descriptors}",
            f"--grpc_python_out={option}{out}",
            *request.file_to_generate,
        ]
        if protoc.main(args) != 0:
            response.error = f"grpc_tools.protoc failed: {' '.join(args[1:])}"
        else:
            for path in sorted(p for p in out.rglob("*") if p.is_file()):
                response.file.add(name=path.relative_to(out).as_posix(), content=path.read_text())
    sys.stdout.buffer.write(response.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())
