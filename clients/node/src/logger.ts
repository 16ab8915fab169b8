/**
 * Logging: the SDK logs through a {@link Logger}, the shape pino and bunyan share
 * (`logger.warn({ jobId }, "lease lost")`), so a pino logger can be passed as is. The default
 * writes to the console at level `info` and above.
 */

/** A structured logger: fields first, then the message (pino's calling convention). */
export interface Logger {
  debug(fields: object, msg: string): void;
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
}

/** The levels a {@link consoleLogger} knows, least severe first. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

function render(fields: object): string {
  const entries = Object.entries(fields);
  if (entries.length === 0) return "";
  return (
    " " +
    entries
      .map(([k, v]) => {
        const s = typeof v === "string" ? v : JSON.stringify(v);
        return `${k}=${s}`;
      })
      .join(" ")
  );
}

/**
 * A logger writing one line per event to `console.debug|info|warn|error`, dropping events
 * below `level` (default `info`, or `$JOBWIRE_LOG_LEVEL` when that names a level).
 */
export function consoleLogger(level?: LogLevel): Logger {
  const env = process.env.JOBWIRE_LOG_LEVEL as LogLevel | undefined;
  const min = ORDER[level ?? (env !== undefined && env in ORDER ? env : "info")];
  const at =
    (lvl: Exclude<LogLevel, "silent">, sink: (line: string) => void) =>
    (fields: object, msg: string): void => {
      if (ORDER[lvl] >= min) sink(`jobwire ${lvl}: ${msg}${render(fields)}`);
    };
  return {
    debug: at("debug", (l) => console.debug(l)),
    info: at("info", (l) => console.info(l)),
    warn: at("warn", (l) => console.warn(l)),
    error: at("error", (l) => console.error(l)),
  };
}

/** A logger that drops everything. */
export const silentLogger: Logger = consoleLogger("silent");
