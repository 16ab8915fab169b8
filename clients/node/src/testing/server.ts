/**
 * A real jobwire server for tests: `jobwire serve` on free loopback ports with its embedded
 * Redis in a temporary directory (or a Redis you name), ready once the gRPC health check says
 * SERVING. The binary is `$JOBWIRE_BIN`, else `jobwire` on the PATH.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { tlsCredentials, type TlsOptions } from "../channel.js";

/** A free TCP port on 127.0.0.1 (bound then released: another process may still take it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? resolve(addr.port) : reject(new Error("no port"))));
    });
  });
}

/** The grpc.health.v1 status of `service` ("" = the server) at `target`: "SERVING", "NOT_SERVING", ... */
export function healthStatus(target: string, service = "", timeoutMs = 2_000, tls?: TlsOptions): Promise<string> {
  const names = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];
  const creds = tls ? tlsCredentials(tls) : grpc.credentials.createInsecure();
  const client = new grpc.Client(target, creds, tls?.serverName ? { "grpc.ssl_target_name_override": tls.serverName } : {});
  // HealthCheckRequest { string service = 1; } and HealthCheckResponse { ServingStatus status = 1; },
  // encoded by hand: two fields are not worth a second code generator.
  const encode = (s: string): Buffer => {
    const b = Buffer.from(s, "utf8");
    return b.length === 0 ? Buffer.alloc(0) : Buffer.concat([Buffer.from([0x0a, b.length]), b]);
  };
  const decode = (buf: Buffer): string => {
    const r = new BinaryReader(buf);
    let status = 0;
    while (r.pos < r.len) {
      const [field, wire] = r.tag();
      if (field === 1) status = r.int32();
      else r.skip(wire);
    }
    return names[status] ?? String(status);
  };
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      "/grpc.health.v1.Health/Check",
      encode,
      decode,
      service,
      new grpc.Metadata(),
      { deadline: Date.now() + timeoutMs },
      (err, res) => {
        client.close();
        if (err) reject(err);
        else resolve(res ?? "UNKNOWN");
      },
    );
  });
}

/** Options of {@link startJobwire}. */
export interface JobwireOptions {
  /** Extra `jobwire serve` flags, e.g. ["--lease-duration", "1s"]. */
  args?: string[];
  /** The binary (default `$JOBWIRE_BIN`, else `jobwire`). */
  bin?: string;
  /** An existing Redis (`--redis-url`); default the embedded one in a temporary directory. */
  redisUrl?: string;
  /** The gRPC port (default a free one). */
  grpcPort?: number;
  /** How long to wait for SERVING (default 30 s). */
  readyTimeoutMs?: number;
  /** Print the server's output (default: only when `$JOBWIRE_TEST_LOG` is set). */
  verbose?: boolean;
  /** How the readiness probe connects to a server started with `--tls-cert` (its CA; a client certificate for mTLS). */
  probeTls?: TlsOptions;
}

/** A running jobwire server. */
export interface JobwireServer {
  /** HOST:PORT of its gRPC port. */
  target: string;
  grpcPort: number;
  httpPort: number;
  dataDir: string;
  process: ChildProcess;
  /** The server's output so far (stdout and stderr). */
  output(): string;
  /** Sends `signal` (default SIGTERM) and waits for the exit (SIGKILL after 10 s). */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** SIGKILL, and waits for the exit. */
  kill(): Promise<void>;
  /** Starts it again on the same ports, Redis and data directory; resolves once SERVING. */
  restart(): Promise<void>;
}

async function waitServing(target: string, proc: ChildProcess, timeoutMs: number, output: () => string, tls?: TlsOptions): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer";
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      throw new Error(`jobwire exited (${proc.exitCode ?? proc.signalCode}) before serving:\n${output()}`);
    }
    try {
      last = await healthStatus(target, "", 1_000, tls);
      if (last === "SERVING") return;
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`jobwire at ${target} not SERVING after ${timeoutMs} ms (last: ${last}):\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function exited(proc: ChildProcess): Promise<void> {
  return proc.exitCode !== null || proc.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => proc.once("exit", () => resolve()));
}

/** Starts `jobwire serve` on free ports and resolves once it is SERVING. */
export async function startJobwire(o: JobwireOptions = {}): Promise<JobwireServer> {
  const bin = o.bin ?? process.env.JOBWIRE_BIN ?? "jobwire";
  const grpcPort = o.grpcPort ?? (await freePort());
  const httpPort = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), "jobwire-node-"));
  const target = `127.0.0.1:${grpcPort}`;
  const args = ["serve", "--grpc-addr", target, "--http-addr", `127.0.0.1:${httpPort}`, "--data-dir", dataDir];
  if (o.redisUrl) args.push("--redis-url", o.redisUrl);
  args.push(...(o.args ?? []));
  const verbose = o.verbose ?? process.env.JOBWIRE_TEST_LOG !== undefined;
  let out = "";
  const launch = (): ChildProcess => {
    const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { RUST_LOG: "warn", ...process.env } });
    // A binary that cannot be started (ENOENT) exits with its error in the output.
    proc.on("error", (e) => (out += `cannot start ${bin}: ${e.message}\n`));
    const sink = (d: Buffer): void => {
      out += d.toString();
      if (out.length > 200_000) out = out.slice(-100_000);
      if (verbose) process.stderr.write(d);
    };
    proc.stdout?.on("data", sink);
    proc.stderr?.on("data", sink);
    return proc;
  };
  const server: JobwireServer = {
    target,
    grpcPort,
    httpPort,
    dataDir,
    process: launch(),
    output: () => out,
    async stop(signal: NodeJS.Signals = "SIGTERM") {
      const p = server.process;
      if (p.exitCode === null && p.signalCode === null) {
        p.kill(signal);
        const t = setTimeout(() => p.kill("SIGKILL"), 10_000);
        await exited(p);
        clearTimeout(t);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
    async kill() {
      const p = server.process;
      if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
      await exited(p);
    },
    async restart() {
      server.process = launch();
      await waitServing(target, server.process, o.readyTimeoutMs ?? 30_000, () => out, o.probeTls);
    },
  };
  try {
    await waitServing(target, server.process, o.readyTimeoutMs ?? 30_000, () => out, o.probeTls);
  } catch (e) {
    await server.stop("SIGKILL");
    throw e;
  }
  return server;
}

/** Options of {@link startRedis}. */
export interface RedisServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

/** A throwaway `redis-server` on a free port, without persistence (for tests that restart jobwire). */
export async function startRedis(bin = "redis-server"): Promise<RedisServer> {
  const port = await freePort();
  const proc = spawn(bin, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
    stdio: "ignore",
  });
  const deadline = Date.now() + 10_000;
  const { connect } = await import("node:net");
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, "127.0.0.1");
      s.once("connect", () => {
        s.write("PING\r\n");
        s.once("data", (d) => {
          s.destroy();
          resolve(d.toString().startsWith("+PONG"));
        });
      });
      s.once("error", () => resolve(false));
    });
    if (ok) break;
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`redis-server on port ${port} did not start`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGKILL");
        await exited(proc);
      }
    },
  };
}
