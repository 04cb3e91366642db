import { SagaDefinitionError } from '../errors.js';

/**
 * Where the library reports what an operator should know. Each call is a fixed message and structured `fields`
 * (ids, names, counts, an error's description); values are never interpolated into the message, and payloads are
 * never logged. Levels: `debug` for the details of a pass, `info` for lifecycle (start, stop, schema verified,
 * operator changes), `warn` for retries and outages, `error` for dead letters, unknown outcomes and what was left
 * behind.
 */
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

/** Whether `level` is one of {@link LOG_LEVELS}. */
export function isLogLevel(level: unknown): level is LogLevel {
  return (LOG_LEVELS as readonly unknown[]).includes(level);
}

/**
 * A logger of the calls at `level` and above (default `warn`), each written by `write`: `[mikro-orm-saga] message`
 * and the fields as an object.
 * @throws SagaDefinitionError `OPTION_INVALID` for a level that is not one of {@link LOG_LEVELS}.
 */
export function levelLogger(
  level: LogLevel,
  write: (level: LogLevel, message: string, fields: Record<string, unknown> | undefined) => void,
  owner = 'consoleLogger',
): SagaLogger {
  if (!isLogLevel(level)) {
    throw new SagaDefinitionError('OPTION_INVALID', `${owner}: the level must be one of ${LOG_LEVELS.join(', ')}; got ${shown(level)}.`);
  }
  const min = LOG_LEVELS.indexOf(level);
  const at = (logged: LogLevel) => (message: string, fields?: Record<string, unknown>) => {
    if (LOG_LEVELS.indexOf(logged) >= min) write(logged, message, fields);
  };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/**
 * A logger writing `[mikro-orm-saga] message` and the fields (as an object) to the console at `level` and above
 * (default `warn`). Pass what it returns, `consoleLogger('info')`, not `consoleLogger` itself.
 * @throws SagaDefinitionError `OPTION_INVALID` for a level that is not one of {@link LOG_LEVELS}.
 */
export function consoleLogger(level: LogLevel = 'warn'): SagaLogger {
  return levelLogger(level, (at, message, fields) => console[at](`[mikro-orm-saga] ${message}`, ...(fields ? [fields] : [])));
}

/** A logger that drops everything. */
export const silentLogger: SagaLogger = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * The `logger` option of the runtime, the dispatcher and the operator API, checked when they are built: `fallback`
 * when it is left out. The logger given is called through {@link guardedLogger}: a logger that fails loses its line,
 * never the work that logged it.
 * @throws SagaDefinitionError `OPTION_INVALID` when it is not an object with the four methods, naming those missing
 *   (`consoleLogger` itself, the factory, is refused with how to call it).
 */
export function resolveLogger(logger: unknown, owner: string, fallback: SagaLogger): SagaLogger {
  if (logger === undefined) return fallback;
  const fix = "pass a SagaLogger: consoleLogger('info') (what the factory returns), silentLogger, or an adapter such as pinoLogger(pino())";
  if (typeof logger === 'function') {
    throw new SagaDefinitionError('OPTION_INVALID', `${owner}: 'logger' is a function, not a logger: ${fix}.`);
  }
  const missing = LOG_LEVELS.filter(
    (method) => logger === null || typeof logger !== 'object' || typeof (logger as Record<string, unknown>)[method] !== 'function',
  );
  if (missing.length > 0) {
    throw new SagaDefinitionError(
      'OPTION_INVALID',
      `${owner}: 'logger' has no ${missing.join(', ')} method${missing.length > 1 ? 's' : ''}: ${fix}.`,
    );
  }
  return guardedLogger(logger as SagaLogger);
}

/**
 * `logger` with every call guarded. A method that throws, or returns a promise that rejects (an async sink that is
 * down), loses its line: a log call sits in a committed unit of work, a delivery's outcome or the dispatcher's loop,
 * and failing there would report a commit as failed, leave a claimed row unrecorded or end the loop. The method is
 * looked up at each call and called on `logger`, so a class's prototype methods keep their `this`.
 */
function guardedLogger(logger: SagaLogger): SagaLogger {
  const at = (level: LogLevel) => (message: string, fields?: Record<string, unknown>) => {
    try {
      const result: unknown = logger[level](message, fields);
      if (isThenable(result)) result.then(undefined, () => undefined);
    } catch {
      // Lost line: see above.
    }
  };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | undefined)?.then === 'function';
}

function shown(value: unknown): string {
  return typeof value === 'string' ? `'${value.slice(0, 40)}'` : `a ${typeof value}`;
}
