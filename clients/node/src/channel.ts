/**
 * The gRPC channel under a {@link Client}: credentials (plaintext, TLS, mTLS, a bearer token),
 * keepalive, and the promise wrapper of unary calls with retries of UNAVAILABLE for the calls
 * that are safe to repeat.
 */
import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { fullJitter, sleep } from "./backoff.js";

/** TLS settings; PEM strings are told from file paths by their "-----BEGIN" header. */
export interface TlsOptions {
  /** The CA certificates to trust (PEM bytes, a PEM string, or a file path); default the system roots. */
  ca?: Buffer | string;
  /** A client certificate for mTLS (a server with `--tls-client-ca`); needs `key`. */
  cert?: Buffer | string;
  /** The client certificate's private key; needs `cert`. */
  key?: Buffer | string;
  /** The name the server's certificate must carry when it differs from the host dialled. */
  serverName?: string;
}

/** How the channel connects. */
export interface ChannelSettings {
  /** A bearer token (`jw_<id>_<secret>` from `jobwire token new`), sent as `authorization: Bearer <token>`. */
  token?: string;
  /** TLS (`true`: the system's roots); default plaintext. */
  tls?: TlsOptions | boolean;
  /**
   * Send the token over plaintext to a host that is not loopback. Off: such a client throws, so a
   * token cannot leak onto a network by accident (gRPC itself refuses call credentials on
   * insecure channels; on loopback the SDK adds the header itself).
   */
  allowInsecureToken?: boolean;
  /** The channel's HTTP/2 keepalive (see {@link KeepaliveOptions}). */
  keepalive?: KeepaliveOptions;
  /** Extra grpc-js channel options (they win over the SDK's, keepalive included). */
  channelOptions?: grpc.ChannelOptions;
}

/**
 * HTTP/2 keepalive: a PING every `intervalMs`, the connection closed (its calls fail
 * UNAVAILABLE, the worker reconnects) when one goes unanswered for `timeoutMs`. A frozen or
 * vanished server is noticed within `intervalMs + timeoutMs`: 15 s with the defaults. The
 * jobwire server answers PINGs without a rate limit; a proxy in between may allow fewer.
 */
export interface KeepaliveOptions {
  /** Milliseconds between PINGs (default 10,000; at least 1,000). */
  intervalMs?: number;
  /** Milliseconds a PING may go unanswered (default 5,000; at least 1,000). */
  timeoutMs?: number;
  /** Also ping while no call is open (default true). */
  withoutCalls?: boolean;
}

/** The default keepalive: a frozen server is noticed within 15 s. */
export const DEFAULT_KEEPALIVE: Required<KeepaliveOptions> = { intervalMs: 10_000, timeoutMs: 5_000, withoutCalls: true };

/** grpc-js channel options for `k` (defaults filled in); throws RangeError below 1 s. */
export function keepaliveOptions(k: KeepaliveOptions = {}): grpc.ChannelOptions {
  const { intervalMs, timeoutMs, withoutCalls } = { ...DEFAULT_KEEPALIVE, ...k };
  if (!(intervalMs >= 1_000 && timeoutMs >= 1_000)) {
    throw new RangeError(`keepalive intervalMs and timeoutMs must be at least 1000, got ${intervalMs} and ${timeoutMs}`);
  }
  return {
    "grpc.keepalive_time_ms": intervalMs,
    "grpc.keepalive_timeout_ms": timeoutMs,
    "grpc.keepalive_permit_without_calls": withoutCalls ? 1 : 0,
  };
}

/** PEM bytes from a Buffer, a PEM string, or a file path. */
export function pem(v: Buffer | string | undefined): Buffer | undefined {
  if (v === undefined) return undefined;
  if (Buffer.isBuffer(v)) return v;
  return v.includes("-----BEGIN") ? Buffer.from(v) : readFileSync(v);
}

function isLoopback(target: string): boolean {
  const host = target
    .replace(/^dns:(\/\/[^/]*\/)?/, "")
    .replace(/^ipv[46]:/, "")
    .replace(/:\d+$/, "")
    .replace(/^\[|\]$/g, "");
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** TLS channel credentials (no call credentials). */
export function tlsCredentials(t: TlsOptions): grpc.ChannelCredentials {
  if ((t.cert === undefined) !== (t.key === undefined)) {
    throw new TypeError("a client certificate needs both tls.cert and tls.key");
  }
  return grpc.credentials.createSsl(pem(t.ca) ?? null, pem(t.key) ?? null, pem(t.cert) ?? null);
}

/** The SDK's channel options besides keepalive: quick reconnects, big messages. */
const DEFAULT_OPTIONS: grpc.ChannelOptions = {
  // The worker has its own jittered reconnect loop; keep the channel's own backoff short.
  "grpc.initial_reconnect_backoff_ms": 250,
  "grpc.max_reconnect_backoff_ms": 5_000,
  "grpc.max_receive_message_length": 16 * 1024 * 1024,
};

/** A channel to `target` (HOST:PORT) and the interceptors its calls need. */
export function openChannel(
  target: string,
  s: ChannelSettings,
): { channel: grpc.Channel; interceptors: grpc.Interceptor[] } {
  const interceptors: grpc.Interceptor[] = [];
  let creds: grpc.ChannelCredentials;
  const options: grpc.ChannelOptions = { ...DEFAULT_OPTIONS, ...keepaliveOptions(s.keepalive), ...s.channelOptions };
  if (s.tls) {
    const t: TlsOptions = s.tls === true ? {} : s.tls;
    creds = tlsCredentials(t);
    if (t.serverName) options["grpc.ssl_target_name_override"] = t.serverName;
    if (s.token) {
      const token = s.token;
      creds = grpc.credentials.combineChannelCredentials(
        creds,
        grpc.credentials.createFromMetadataGenerator((_params, cb) => {
          const md = new grpc.Metadata();
          md.set("authorization", `Bearer ${token}`);
          cb(null, md);
        }),
      );
    }
  } else {
    creds = grpc.credentials.createInsecure();
    if (s.token) {
      if (!isLoopback(target) && !s.allowInsecureToken) {
        throw new TypeError(
          `refusing to send a token in clear text to ${target}: use tls, or allowInsecureToken on a network you trust`,
        );
      }
      const header = `Bearer ${s.token}`;
      interceptors.push((opts, next) =>
        new grpc.InterceptingCall(next(opts), {
          start(metadata, listener, nextStart) {
            metadata.set("authorization", header);
            nextStart(metadata, listener);
          },
        }),
      );
    }
  }
  return { channel: new grpc.Channel(target, creds, options), interceptors };
}

/** Per-call settings. */
export interface CallSettings {
  /** Deadline of each try, in milliseconds (default: the client's, 10 s). */
  timeoutMs?: number;
  /** An AbortSignal that cancels the call (and its retries). */
  signal?: AbortSignal;
}

/** Retries of UNAVAILABLE: how many tries in all, and the full-jitter bounds between them. */
export interface RetryPolicy {
  /** Tries in all, the first included (default 5; 1 = no retry). */
  attempts: number;
  baseMs: number;
  capMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 5, baseMs: 100, capMs: 2_000 };

type Callback<Res> = (err: grpc.ServiceError | null, res: Res) => void;
/** A generated client method, bound, in its (request, metadata, options, callback) form. */
export type UnaryMethod<Req, Res> = (
  req: Req,
  md: grpc.Metadata,
  opts: Partial<grpc.CallOptions>,
  cb: Callback<Res>,
) => grpc.ClientUnaryCall;

/** True for a gRPC error with one of `codes`. */
export function hasCode(err: unknown, ...codes: grpc.status[]): err is grpc.ServiceError {
  return typeof err === "object" && err !== null && codes.includes((err as grpc.ServiceError).code);
}

/** One unary call as a promise (no retry). */
export function callOnce<Req, Res>(method: UnaryMethod<Req, Res>, req: Req, timeoutMs: number, signal?: AbortSignal): Promise<Res> {
  return new Promise((resolve, reject) => {
    const call = method(req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
      signal?.removeEventListener("abort", cancel);
      if (err) reject(err);
      else resolve(res);
    });
    function cancel(): void {
      call.cancel();
    }
    if (signal?.aborted) cancel();
    else signal?.addEventListener("abort", cancel, { once: true });
  });
}

/**
 * A unary call that, when `idempotent`, is tried again on UNAVAILABLE (the server or its Redis
 * is briefly unreachable; DESIGN.md: "UNAVAILABLE while Redis is down (clients retry)") with
 * full-jitter backoff. Other errors are thrown at once.
 */
export async function call<Req, Res>(
  method: UnaryMethod<Req, Res>,
  req: Req,
  timeoutMs: number,
  idempotent: boolean,
  retry: RetryPolicy,
  signal?: AbortSignal,
): Promise<Res> {
  for (let n = 0; ; n++) {
    try {
      return await callOnce(method, req, timeoutMs, signal);
    } catch (e) {
      if (!idempotent || n + 1 >= retry.attempts || signal?.aborted || !hasCode(e, grpc.status.UNAVAILABLE)) throw e;
      await sleep(fullJitter(n, { baseMs: retry.baseMs, capMs: retry.capMs }), signal);
    }
  }
}
