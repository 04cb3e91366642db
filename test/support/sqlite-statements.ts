import type { MikroORM } from '@mikro-orm/core';

/** What knex hands the SQLite driver of an ORM (MikroORM 6), recorded until `stop()`. */
export interface StatementRecorder {
  /** The SQL of each statement, lowercased, in the order knex handed them over. */
  readonly sent: string[];
  /** Resolves once a statement of `kind` (its first word: 'update', 'begin', ...) has been handed to the driver. */
  whenSent(kind: string): Promise<void>;
  stop(): void;
}

/** Records every statement knex hands the SQLite driver of `orm` (MikroORM 6: node-sqlite3 or better-sqlite3). */
export function recordStatements(orm: MikroORM): StatementRecorder {
  const client = (orm.em.getConnection() as unknown as { getKnex(): { client: Record<string, unknown> } }).getKnex().client;
  const original = client._query as (connection: unknown, query: { sql: string }) => Promise<unknown>;
  const sent: string[] = [];
  const waiting: { kind: string; resolve: () => void }[] = [];
  client._query = function (this: unknown, connection: unknown, query: { sql: string }) {
    const sql = query.sql.trim().toLowerCase();
    sent.push(sql);
    for (const waiter of waiting.splice(0)) {
      if (kindOf(sql) === waiter.kind) waiter.resolve();
      else waiting.push(waiter);
    }
    return original.call(this, connection, query);
  };
  return {
    sent,
    whenSent: (kind) =>
      sent.some((sql) => kindOf(sql) === kind) ? Promise.resolve() : new Promise((resolve) => waiting.push({ kind, resolve })),
    stop: () => void delete client._query,
  };
}

/** The first word of each statement: 'select', 'begin', 'update', 'savepoint', 'commit', ... */
export function kinds(sent: readonly string[]): string[] {
  return sent.map(kindOf);
}

function kindOf(sql: string): string {
  return sql.split(/\s/)[0] ?? '';
}
