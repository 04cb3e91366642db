import type { EntityManager } from '@mikro-orm/core';
import type { NotificationClient, PgClientLike } from '../notification-client.js';

/** The slice of pg's pool that makes a client outside it. */
interface PgPoolLike {
  /** The client class the pool makes its clients of (pg's `Client` unless configured). */
  readonly Client: new (
    options: object,
  ) => PgClientLike & { connect(): Promise<void>; end(): Promise<void> };
  /** The settings the pool makes its clients with. */
  readonly options: object;
}

/**
 * MikroORM 7: a client of the class and settings MikroORM's pg pool makes its own of, not taken from the pool.
 * Undefined when MikroORM does not hand out its pool (a Kysely instance or dialect of the application's as
 * `driverOptions`) or `em` is not on pg.
 */
export async function openPgNotificationClient(em: EntityManager): Promise<NotificationClient | undefined> {
  const connection = em.getConnection('write') as { getNativeClient?(): Promise<unknown> };
  if (typeof connection.getNativeClient !== 'function') return undefined;
  let pool: Partial<PgPoolLike>;
  try {
    pool = (await connection.getNativeClient()) as Partial<PgPoolLike>;
  } catch {
    return undefined;
  }
  if (typeof pool?.Client !== 'function' || !pool.options) return undefined;
  const client = new pool.Client(pool.options);
  // Before connecting: a pg client's 'error' without a listener throws out of the process.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    await client.end().catch(() => undefined);
    throw error;
  }
  return { client, close: () => client.end() };
}
