import { createHash } from 'node:crypto';
import type { DatabaseContext } from './database-context.js';
import type { SqlStatement } from './sql-executor.js';

/*
 * PostgreSQL's LISTEN/NOTIFY between the runtimes that commit rows due at once and the dispatchers of other
 * processes: one channel per set of library tables, so apps with other table names or schemas on one database do not
 * wake each other's dispatchers. The payload is empty: a notification says "claim now", never which rows.
 */

/** What every channel name begins with. */
const CHANNEL_PREFIX = 'mikro_orm_saga:';
/** PostgreSQL's longest identifier (NAMEDATALEN - 1), in bytes: `pg_notify()` refuses a longer channel. */
const MAX_CHANNEL_BYTES = 63;

/**
 * The channel of `db`'s library tables: the prefix and the outbox table's schema-qualified name as MikroORM's metadata
 * has it; over 63 bytes, the prefix and a hash of that name.
 */
export function dispatcherChannel(db: DatabaseContext): string {
  const channel = `${CHANNEL_PREFIX}${db.tables.outbox.qualifiedName}`;
  if (Buffer.byteLength(channel, 'utf8') <= MAX_CHANNEL_BYTES) return channel;
  const hash = createHash('sha256').update(db.tables.outbox.qualifiedName, 'utf8').digest('hex');
  return `${CHANNEL_PREFIX}${hash.slice(0, MAX_CHANNEL_BYTES - CHANNEL_PREFIX.length)}`;
}

/** Wakes the sessions listening on `channel`. `pg_notify()`, not NOTIFY: the channel is a parameter there. */
export function notifyStatement(channel: string): SqlStatement {
  return { sql: "select pg_notify(?, '')", params: [channel] };
}

/** Listens on `channel` (a quoted identifier: its case and punctuation are kept as they are). */
export function listenSql(channel: string): string {
  return `listen "${channel.replaceAll('"', '""')}"`;
}
