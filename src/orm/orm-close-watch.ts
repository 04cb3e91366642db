import type { EntityManager } from '@mikro-orm/core';

/*
 * Whether the MikroORM instance behind an EntityManager was closed. Neither major announces `orm.close()`: it calls
 * its driver's `close()`, which on 6 destroys knex (whose pool then waits for every connection checked out, while
 * new acquires wait for its acquire timeout) and on 7 destroys kysely and drops it, so that the next statement
 * builds a new pool and connects again (`AbstractSqlConnection.getClient()`). `isConnected()` sends `select 1`, which
 * waits for a connection as well. The library therefore watches the driver's `close()` and `connect()` (which
 * `orm.reconnect()` calls after `close()`), once per driver, and refuses to start statements while it is closed.
 */

/** What the library knows of the ORM's life. */
export interface OrmCloseWatch {
  /** True from the call of `orm.close()` on, until the ORM connects again. */
  readonly closed: boolean;
  /** Calls `listener` when `orm.close()` is called (at once when closed); returns the unsubscribe function. */
  onClose(listener: () => void): () => void;
  /** Calls `listener` when the ORM connects again after a close (at once when open); returns the unsubscribe function. */
  onOpen(listener: () => void): () => void;
}

/** Thrown instead of starting a statement, or waiting for a connection, once the ORM was closed. */
export class OrmClosed extends Error {
  constructor() {
    super('the MikroORM instance was closed (orm.close()): no statement is sent on it');
  }
}

interface DriverLike {
  close(...args: unknown[]): Promise<unknown>;
  connect(...args: unknown[]): Promise<unknown>;
  getConnection(type?: string): unknown;
}

/** Listeners of an event that may come again: each hears of its next coming once; added with `now` (the event holds already), at once. */
class OnceListeners {
  private readonly listeners = new Set<() => void>();

  add(listener: () => void, now: boolean): () => void {
    if (now) {
      listener();
      return () => undefined;
    }
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  fire(): void {
    const listeners = [...this.listeners];
    this.listeners.clear();
    for (const listener of listeners) listener();
  }
}

class DriverCloseWatch implements OrmCloseWatch {
  private readonly closing = new OnceListeners();
  private readonly opening = new OnceListeners();

  constructor(public closed: boolean) {}

  onClose(listener: () => void): () => void {
    return this.closing.add(listener, this.closed);
  }

  markClosed(): void {
    this.closed = true;
    this.closing.fire();
  }

  onOpen(listener: () => void): () => void {
    return this.opening.add(listener, !this.closed);
  }

  markOpen(): void {
    this.closed = false;
    this.opening.fire();
  }
}

/** One watch per driver (an ORM's forks share its driver), installed by the first runtime built on it. */
const watches = new WeakMap<object, DriverCloseWatch>();

/** The watch of `em`'s ORM, installed on its driver the first time. */
export function watchOrmClose(em: EntityManager): OrmCloseWatch {
  const driver = em.getDriver() as unknown as DriverLike;
  const watched = watches.get(driver);
  if (watched) return watched;
  const created = new DriverCloseWatch(closedAlready(driver.getConnection('write')));
  const { close, connect } = driver;
  driver.close = function (this: unknown, ...args: unknown[]) {
    created.markClosed();
    return close.apply(this, args);
  };
  driver.connect = async function (this: unknown, ...args: unknown[]) {
    const connection = await connect.apply(this, args);
    created.markOpen();
    return connection;
  };
  watches.set(driver, created);
  return created;
}

/** Throws {@link OrmClosed} when `em`'s ORM is watched and closed. */
export function assertOrmOpen(em: EntityManager): void {
  if (watches.get(em.getDriver())?.closed) throw new OrmClosed();
}

/** Whether `em`'s ORM is watched and closed. */
export function isOrmClosed(em: EntityManager): boolean {
  return watches.get(em.getDriver())?.closed === true;
}

/**
 * `waiting` (a connection from the pool, or a read that waits for one), or {@link OrmClosed} as soon as `em`'s ORM
 * is closed: knex's pool hands out nothing once its destruction began, until its connections in use came back. What
 * `waiting` gives after that goes to `giveBack`. Only for what may be abandoned: never a write outside a transaction.
 */
export function untilOrmClosed<T>(em: EntityManager, waiting: Promise<T>, giveBack: (late: T) => void): Promise<T> {
  const watch = watches.get(em.getDriver());
  if (!watch) return waiting;
  return new Promise<T>((resolve, reject) => {
    let lost = false;
    const unsubscribe = watch.onClose(() => {
      lost = true;
      reject(new OrmClosed());
    });
    waiting.then(
      (value) => {
        unsubscribe();
        if (lost) giveBack(value);
        else resolve(value);
      },
      (error: unknown) => {
        unsubscribe();
        reject(error);
      },
    );
  });
}

/**
 * Whether the connection was closed before the watch began: `Connection.close()` empties its options on both majors;
 * 7 then marks it not connected, 6 leaves knex without a pool.
 */
function closedAlready(connection: unknown): boolean {
  const { options, connected, client } = connection as {
    options?: Record<string, unknown>;
    connected?: boolean;
    client?: { client?: { pool?: unknown } };
  };
  const emptied = options !== undefined && Object.keys(options).every((key) => key === 'name');
  const knexDestroyed = client?.client !== undefined && client.client.pool == null;
  return emptied && (connected === false || knexDestroyed);
}
