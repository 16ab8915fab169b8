/**
 * Conversions between the SDK's plain values (milliseconds, objects, strings) and the wire
 * types (google.protobuf.Duration, payload bytes with a content type).
 */
import type { Duration } from "./gen/google/protobuf/duration.js";

/** The content type the SDK gives a payload it JSON-encoded (and decodes on the worker side). */
export const JSON_CONTENT_TYPE = "application/json";
/** The content type the SDK gives a string payload (sent as its UTF-8 bytes). */
export const TEXT_CONTENT_TYPE = "text/plain; charset=utf-8";

/** A google.protobuf.Duration of `ms` milliseconds (fractions of a millisecond are kept to the ns). */
export function msToDuration(ms: number): Duration {
  if (!Number.isFinite(ms) || ms < 0) {
    throw new RangeError(`a duration must be a finite number of milliseconds >= 0, got ${ms}`);
  }
  const seconds = Math.floor(ms / 1000);
  const nanos = Math.round((ms - seconds * 1000) * 1e6);
  return nanos >= 1e9 ? { seconds: seconds + 1, nanos: nanos - 1e9 } : { seconds, nanos };
}

/** Milliseconds of a google.protobuf.Duration (0 when unset). */
export function durationToMs(d: Duration | undefined): number {
  if (d === undefined) return 0;
  return d.seconds * 1000 + d.nanos / 1e6;
}

/** What a producer may pass as a payload. */
export type Payload = Uint8Array | string | object | number | boolean | null;

/**
 * The bytes and content type of a payload: bytes are sent as they are (no content type unless
 * given), a string as its UTF-8 bytes (`text/plain; charset=utf-8`), anything else as JSON
 * (`application/json`). An explicit `contentType` wins.
 */
export function encodePayload(payload: Payload, contentType?: string): { payload: Buffer; contentType: string } {
  if (payload instanceof Uint8Array) {
    return { payload: Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength), contentType: contentType ?? "" };
  }
  if (typeof payload === "string") {
    return { payload: Buffer.from(payload, "utf8"), contentType: contentType ?? TEXT_CONTENT_TYPE };
  }
  const json = JSON.stringify(payload);
  if (json === undefined) throw new TypeError("the payload cannot be encoded as JSON");
  return { payload: Buffer.from(json, "utf8"), contentType: contentType ?? JSON_CONTENT_TYPE };
}

/**
 * The payload a handler sees: JSON-decoded when the content type is `application/json`
 * (parameters such as `; charset=utf-8` allowed), the UTF-8 string for `text/plain`, else the
 * bytes. Invalid JSON throws (the attempt then fails with RETRY like any handler error).
 */
export function decodePayload(bytes: Buffer, contentType: string): unknown {
  const mime = contentType.split(";")[0]?.trim().toLowerCase() ?? "";
  if (mime === JSON_CONTENT_TYPE || mime.endsWith("+json")) return JSON.parse(bytes.toString("utf8"));
  if (mime === "text/plain") return bytes.toString("utf8");
  return bytes;
}
