import type { EntityManager } from '@mikro-orm/core';
import type { NotificationClient, PgClientLike } from '../notification-client.js';

/** The slice of knex's PostgreSQL client that opens a connection outside its pool. */
interface KnexRawConnections {
  readonly dialect: string;
  /** A connected pg client with the pool's settings, which the pool does not know (knex's pool creates them so). */
  acquireRawConnection(): Promise<PgClientLike>;
  /** Ends a client {@link acquireRawConnection} opened. */
  destroyRawConnection(connection: PgClientLike): Promise<void>;
}

/**
 * MikroORM 6: a pg client outside knex's pool, opened by knex's PostgreSQL client as its pool opens its own (the
 * connection settings and search path of the pool). Undefined where `em` has no knex PostgreSQL client.
 */
export async function openKnexNotificationClient(em: EntityManager): Promise<NotificationClient | undefined> {
  const connection = em.getConnection('write') as { getKnex?(): { client?: Partial<KnexRawConnections> } };
  const knex = connection.getKnex?.()?.client;
  if (knex?.dialect !== 'postgresql' || typeof knex.acquireRawConnection !== 'function') return undefined;
  const raw = knex as KnexRawConnections;
  // knex listens for the client's 'error' and 'end' itself, before connecting: a failure never goes unheard.
  const client = await raw.acquireRawConnection();
  return { client, close: () => raw.destroyRawConnection(client) };
}
