import { type NotificationConnection, openNotificationConnection } from '../orm/index.js';
import type { DatabaseContext } from '../sql/database-context.js';
import { dispatcherChannel, listenSql } from '../sql/notification-statements.js';
import { describeError } from '../telemetry/describe-error.js';
import type { SagaLogger } from '../telemetry/logger.js';
import { type Clock, ENDED } from '../time/clock.js';

/** What a {@link NotificationListener} needs of its dispatcher. */
export interface NotificationListenerOptions {
  readonly context: DatabaseContext;
  readonly clock: Clock;
  readonly logger: SagaLogger;
  /** The first wait before opening again, ms; it doubles up to `dbRetryMaxMs`, as the loop's after failed passes. */
  readonly pollIntervalMs: number;
  readonly dbRetryMaxMs: number;
  /** A unit of work of another process committed rows due at once (or, after a reopen, may have meanwhile). */
  readonly onRowsDue: () => void;
  /** The connection listens: at start, and again after each reopen. */
  readonly onListening: () => void;
  /** Called once, when the first attempt to listen ended: listening, failed, or nothing to listen on. */
  readonly onFirstAttempt: () => void;
}

/** How the wait on a listening connection ended: the connection was lost, the dispatcher stopped, the ORM closed. */
type Ending = 'lost' | 'stopped' | 'closed';

/**
 * A dispatcher's connection of its own (outside MikroORM's pool) that LISTENs on the library tables' channel, which
 * runtimes of other processes NOTIFY when they commit rows due at once (PostgreSQL). A lost connection is logged once
 * as a warning and opened again with the loop's backoff, while the loop keeps polling. Closed at stop, and when the
 * ORM is closed; opened again when it connects again (`orm.reconnect()`). Each time it listens again, the loop is
 * woken once: rows committed while it was away woke no one.
 */
export class NotificationListener {
  private readonly channel: string;

  constructor(private readonly options: NotificationListenerOptions) {
    this.channel = dispatcherChannel(options.context);
  }

  /** Listens until `signal` aborts; resolves once the connection is closed. */
  async run(signal: AbortSignal): Promise<void> {
    try {
      await this.listen(signal);
    } finally {
      this.options.onFirstAttempt();
    }
  }

  private async listen(signal: AbortSignal): Promise<void> {
    const { context, logger } = this.options;
    let failures = 0;
    let reopening = false;
    while (!signal.aborted) {
      if (context.orm.closed) {
        // orm.close() closed the connection; orm.reconnect() (or connect()) opens it again.
        await this.untilOpen(signal);
        reopening = true;
        continue;
      }
      let lost!: (error: unknown) => void;
      const whenLost = new Promise<unknown>((resolve) => {
        lost = resolve;
      });
      let connection: NotificationConnection | undefined;
      try {
        connection = await this.open(lost);
        if (!connection) return logger.info('dispatcher: MikroORM hands out no connection to LISTEN on; the loop polls only');
      } catch (error) {
        this.options.onFirstAttempt();
        failures++;
        const wait = this.backoff(failures, signal);
        // The first failure is worth a warning: the one of a loss came already.
        const report = failures === 1 && !reopening ? logger.warn : logger.debug;
        report.call(logger, "dispatcher: could not LISTEN for other processes' commits; polling meanwhile, trying again after a backoff", {
          retryInMs: wait.ms,
          error: describeError(error),
        });
        await wait.done;
        continue;
      }
      if (signal.aborted) return connection.close().catch(() => undefined);
      if (context.orm.closed) {
        await connection.close().catch(() => undefined);
        continue;
      }
      failures = 0;
      if (reopening) logger.info('dispatcher: listening again for commits of other processes');
      this.options.onListening();
      this.options.onFirstAttempt();
      // Rows committed while the connection was away woke no one. (At start the loop's first passes claim what is due.)
      if (reopening) this.options.onRowsDue();
      const ending = await this.until(whenLost, signal);
      if (ending === 'stopped') return connection.close().catch(() => undefined);
      if (ending === 'closed') {
        await connection.close().catch(() => undefined);
        continue;
      }
      reopening = true;
      failures = 1;
      const wait = this.backoff(failures, signal);
      logger.warn('dispatcher: lost its LISTEN connection; polling meanwhile, opening it again after a backoff', {
        retryInMs: wait.ms,
        error: describeError(await whenLost),
      });
      await wait.done;
    }
  }

  /** Resolves when the ORM is connected again, or `signal` aborts. */
  private untilOpen(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const ended = new AbortController();
      let unsubscribe = (): unknown => undefined;
      const done = () => {
        ended.abort(ENDED);
        unsubscribe();
        resolve();
      };
      unsubscribe = this.options.context.orm.onOpen(done);
      if (signal.aborted) done();
      else signal.addEventListener('abort', done, { once: true, signal: ended.signal });
    });
  }

  /** Opens a connection and listens; closes it again when that fails. Undefined where MikroORM hands none out. */
  private async open(lost: (error: unknown) => void): Promise<NotificationConnection | undefined> {
    const connection = await openNotificationConnection(this.options.context.autocommit, {
      onNotification: () => this.options.onRowsDue(),
      onLost: lost,
    });
    if (!connection) return undefined;
    try {
      await connection.send(listenSql(this.channel));
    } catch (error) {
      await connection.close().catch(() => undefined);
      throw error;
    }
    return connection;
  }

  /** Resolves when the connection is lost, `signal` aborts or the ORM is closed (it then holds no connection open). */
  private async until(whenLost: Promise<unknown>, signal: AbortSignal): Promise<Ending> {
    if (signal.aborted) return 'stopped';
    const ended = new AbortController();
    let unsubscribe = () => undefined as unknown;
    const stopped = new Promise<Ending>((resolve) => {
      signal.addEventListener('abort', () => resolve('stopped'), { once: true, signal: ended.signal });
      unsubscribe = this.options.context.orm.onClose(() => resolve('closed'));
    });
    try {
      return await Promise.race([whenLost.then((): Ending => 'lost'), stopped]);
    } finally {
      ended.abort(ENDED);
      unsubscribe();
    }
  }

  /** The wait after `failures` failed opens (the loop's backoff), started now: `done` resolves early when `signal` aborts. */
  private backoff(failures: number, signal: AbortSignal): { ms: number; done: Promise<void> } {
    const { clock, pollIntervalMs, dbRetryMaxMs } = this.options;
    const ms = Math.min(dbRetryMaxMs, pollIntervalMs * 2 ** (failures - 1));
    return { ms, done: clock.sleep(ms, signal) };
  }
}
