/** Where the library reports what an operator should know: outages, dead letters, failed deliveries. */
export interface SagaLogger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** Closed set of log levels, lowest first. */
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
/** A log level. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A logger writing `[mikro-orm-saga]` lines to the console at `level` and above (default `warn`). */
export function consoleLogger(level: LogLevel = 'warn'): SagaLogger {
  const min = LOG_LEVELS.indexOf(level);
  const write = (at: LogLevel) => (message: string, fields?: Record<string, unknown>) => {
    if (LOG_LEVELS.indexOf(at) < min) return;
    console[at](`[mikro-orm-saga] ${message}`, ...(fields ? [fields] : []));
  };
  return { debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}

/** A logger that drops everything. */
export const silentLogger: SagaLogger = { debug() {}, info() {}, warn() {}, error() {} };
