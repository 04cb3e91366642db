import type { EntityManager } from '@mikro-orm/core';
import { ORM_MAJOR } from './orm-major.js';

/** Whether the database answers a trivial query. */
export async function isReachable(em: EntityManager): Promise<boolean> {
  return (await em.getConnection().checkConnection()).ok;
}

/** The configured database file (SQLite) or name. */
export function configuredDbName(em: EntityManager): string | undefined {
  return em.config.get('dbName');
}

/** Host, port and database name of a server connection, from the ORM config: never the user or the password. */
export function serverAddress(em: EntityManager): { host?: string; port?: number; database?: string } {
  const { host, port, database } = em.getConnection().getConnectionOptions();
  return { host, port, database };
}

/** Class names along the prototype chain of `em`'s platform, most specific first. */
export function platformNames(em: EntityManager): string[] {
  const names: string[] = [];
  for (let proto = Object.getPrototypeOf(em.getPlatform()); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    names.push(proto.constructor.name);
  }
  return names;
}

/** Settings of node-postgres connections that {@link pgConnectionOptions} passes through. */
export interface PgConnectionSettings {
  /** `application_name`, shown in `pg_stat_activity`. */
  readonly applicationName?: string;
  /** How long a new connection may take before it fails, ms (pg's `connectionTimeoutMillis`; default: no limit). */
  readonly connectionTimeoutMs?: number;
  /** Server settings sent at connect, e.g. `-c lock_timeout=50` (pg's `options`). */
  readonly serverOptions?: string;
}

/**
 * MikroORM `driverOptions` that give node-postgres connections these settings. MikroORM 6 hands
 * `driverOptions.connection` to knex; 7 spreads `driverOptions` into pg's Pool options. The other major's shape
 * is ignored by 6 and breaks connecting on 7, so no feature tells them apart before use.
 */
export function pgConnectionOptions(settings: PgConnectionSettings): Record<string, unknown> {
  const connection: Record<string, unknown> = {};
  if (settings.applicationName !== undefined) connection.application_name = settings.applicationName;
  if (settings.connectionTimeoutMs !== undefined) connection.connectionTimeoutMillis = settings.connectionTimeoutMs;
  if (settings.serverOptions !== undefined) connection.options = settings.serverOptions;
  return ORM_MAJOR === 6 ? { connection } : connection;
}
