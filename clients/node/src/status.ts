/**
 * The google.rpc ErrorInfo the server attaches to every error (`grpc-status-details-bin`),
 * read without the googleapis protos: a google.rpc.Status holds its details as `Any` messages
 * (field 3), and an ErrorInfo is `reason` (1), `domain` (2) and a `metadata` map (3).
 */
import * as grpc from "@grpc/grpc-js";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";

/** The length-delimited fields of one message, as [number, bytes]; others are skipped. */
function fields(buf: Uint8Array): [number, Uint8Array][] {
  const r = new BinaryReader(buf);
  const out: [number, Uint8Array][] = [];
  while (r.pos < r.len) {
    const [number, wire] = r.tag();
    if (wire === WireType.LengthDelimited) out.push([number, r.bytes()]);
    else r.skip(wire);
  }
  return out;
}

const text = (b: Uint8Array | undefined): string => (b === undefined ? "" : new TextDecoder().decode(b));

/** The ErrorInfo (reason, metadata) of a failed call, or undefined when it carries none. */
export function errorInfo(err: unknown): { reason: string; metadata: Record<string, string> } | undefined {
  const md = (err as { metadata?: unknown } | null)?.metadata;
  if (!(md instanceof grpc.Metadata)) return undefined;
  for (const raw of md.get("grpc-status-details-bin")) {
    if (typeof raw === "string") continue;
    try {
      for (const [n, detail] of fields(raw)) {
        if (n !== 3) continue;
        const any = new Map(fields(detail));
        if (text(any.get(1)) !== ERROR_INFO) continue;
        let reason = "";
        const metadata: Record<string, string> = {};
        for (const [m, v] of fields(any.get(2) ?? new Uint8Array())) {
          if (m === 1) reason = text(v);
          if (m === 3) {
            const entry = new Map(fields(v));
            metadata[text(entry.get(1))] = text(entry.get(2));
          }
        }
        return { reason, metadata };
      }
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * The id of the job an Enqueue wrote on the Redis master though too few replicas acknowledged
 * it (UNAVAILABLE, ErrorInfo reason NOT_REPLICATED, metadata `job_id`), or undefined for any
 * other error. Retrying with this `jobId` finds that job instead of creating another.
 */
export function notReplicatedJobId(err: unknown): string | undefined {
  if ((err as { code?: unknown } | null)?.code !== grpc.status.UNAVAILABLE) return undefined;
  const info = errorInfo(err);
  if (info?.reason !== "NOT_REPLICATED") return undefined;
  return info.metadata.job_id || undefined;
}
