import type { Logger } from '@mikro-orm/core';
import { SagaDefinitionError } from '../errors.js';
import { type LogLevel, levelLogger, type SagaLogger } from './logger.js';

/** The part of a pino logger {@link pinoLogger} calls: pino's `(fields, message)` argument order. */
export interface PinoLike {
  /** Writes a debug line: `fields` as its properties, `message` as its `msg`. */
  debug(fields: object, message?: string): void;
  /** Writes an info line. */
  info(fields: object, message?: string): void;
  /** Writes a warning line. */
  warn(fields: object, message?: string): void;
  /** Writes an error line. */
  error(fields: object, message?: string): void;
}

/**
 * A {@link SagaLogger} writing to pino (or any logger with pino's `(fields, message)` order): the fields become
 * properties of the JSON line, the message its `msg`. pino's own level filters, as for the app's other lines.
 *
 * ```ts
 * new SagaRuntime({ em, sagas, logger: pinoLogger(pino().child({ component: 'sagas' })) });
 * ```
 * @throws SagaDefinitionError `OPTION_INVALID` for a value without the four methods, such as `pino` itself.
 */
export function pinoLogger(logger: PinoLike): SagaLogger {
  assertMethods(
    'pinoLogger',
    logger,
    ['debug', 'info', 'warn', 'error'],
    'a pino logger, such as pinoLogger(pino()) or pinoLogger(log.child({ ... }))',
  );
  return {
    debug: (message, fields) => logger.debug(fields ?? {}, message),
    info: (message, fields) => logger.info(fields ?? {}, message),
    warn: (message, fields) => logger.warn(fields ?? {}, message),
    error: (message, fields) => logger.error(fields ?? {}, message),
  };
}

/** Options of {@link mikroOrmLogger}. */
export interface MikroOrmLoggerOptions {
  /** The lowest level written. Default `warn`, as `consoleLogger`. */
  readonly level?: LogLevel;
  /** The namespace of the lines (`[mikro-orm-saga] ...` with MikroORM's `DefaultLogger`). Default `mikro-orm-saga`. */
  readonly namespace?: string;
}

/**
 * A {@link SagaLogger} writing through MikroORM's logger (`orm.config.getLogger()`, or any MikroORM `Logger`), so
 * the library's lines go where the ORM's do. MikroORM's logger has no levels below warnings: `debug` and `info` go
 * to `log()`, `warn` to `warn()`, `error` to `error()`. Lines at `level` and above are written whatever the ORM's
 * `debug` setting (`enabled: true`); those below are dropped. A line is the message followed by its fields as JSON;
 * the fields are also in the log context (`context.fields`) for a custom MikroORM logger.
 * @throws SagaDefinitionError `OPTION_INVALID` for a value without `log`, `warn` and `error` (such as
 *   `orm.config.getLogger` itself), or a level that is not one of `debug`, `info`, `warn`, `error`.
 */
export function mikroOrmLogger(logger: Pick<Logger, 'log' | 'warn' | 'error'>, options: MikroOrmLoggerOptions = {}): SagaLogger {
  assertMethods('mikroOrmLogger', logger, ['log', 'warn', 'error'], "MikroORM's logger, such as mikroOrmLogger(orm.config.getLogger())");
  const namespace = options.namespace ?? 'mikro-orm-saga';
  return levelLogger(
    options.level ?? 'warn',
    (level, message, fields) => {
      const line = fields ? `${message} ${jsonOf(fields)}` : message;
      const context = { enabled: true, ...(fields ? { fields } : {}) };
      if (level === 'error') logger.error(namespace, line, context);
      else if (level === 'warn') logger.warn(namespace, line, context);
      else logger.log(namespace, line, context);
    },
    'mikroOrmLogger',
  );
}

/** Fields as JSON; a value JSON cannot write (a BigInt, a cycle) as its kind. */
function jsonOf(fields: Record<string, unknown>): string {
  try {
    return JSON.stringify(fields);
  } catch {
    return JSON.stringify(Object.fromEntries(Object.entries(fields).map(([key, value]) => [key, `(a ${typeof value})`])));
  }
}

/**
 * Refuses, when the adapter is made, a logger without the methods it calls: the factory itself (`pino`,
 * `orm.config.getLogger`) would otherwise lose every line later, without a word.
 * @throws SagaDefinitionError `OPTION_INVALID` naming the missing methods and what to pass.
 */
function assertMethods(owner: string, logger: unknown, methods: readonly string[], fix: string): void {
  const holder = (typeof logger === 'object' && logger !== null) || typeof logger === 'function';
  const missing = methods.filter((method) => !holder || typeof (logger as Record<string, unknown>)[method] !== 'function');
  if (missing.length > 0) {
    const what =
      typeof logger === 'function' ? 'a function' : holder ? 'an object' : logger == null ? String(logger) : `a ${typeof logger}`;
    throw new SagaDefinitionError('OPTION_INVALID', `${owner}: the logger given is ${what} without ${missing.join(', ')}: pass ${fix}.`);
  }
}
