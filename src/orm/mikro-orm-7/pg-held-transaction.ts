import type { EntityManager } from '@mikro-orm/core';
import { COMMIT_SQL, type ConnectionHold, type HeldTransaction, TRANSACTION_ENDED, takeUnsent } from '../held-transaction.js';
import { logQuery } from '../sql-execution.js';
import { type CompiledQuery, heldKysely, type KyselyConnection, type KyselyLike } from './held-kysely.js';

/*
 * A unit's transaction on MikroORM 7 with PostgreSQL, held by the library on a connection of MikroORM's own pg pool,
 * as on MikroORM 6 through knex: BEGIN goes with the transaction's first statement, what waits to go with the next
 * statement goes with it, COMMIT goes with the transaction's only statement when asked, and several statements go as
 * one string whose answers are all read. MikroORM 7's client (kysely) reads one result per string and sends BEGIN and
 * COMMIT as statements of their own: a message's unit of work took four round trips there, against two on 6.
 *
 * MikroORM is given a transaction context it runs every statement on as it runs them on kysely's: a Kysely over
 * MikroORM's own executor (its query compiler, adapter and plugins), whose one connection is this transaction's, with
 * the savepoint methods MikroORM's nested `em.transactional()` calls. `em.getKysely()` in a step returns it, so typed
 * queries run in the unit's transaction too.
 */

/** The slice of pg (MikroORM 7's PostgreSQL driver) a held transaction uses. */
interface PgPool {
  connect(): Promise<PgClient>;
}

interface PgClient {
  query(text: string, values?: readonly unknown[]): Promise<PgResult | PgResult[]>;
  /** Hands the connection back to the pool; with an error, the pool closes it instead. */
  release(error?: Error): void;
}

interface PgResult {
  readonly command?: string | null;
  readonly rowCount?: number | null;
  readonly rows?: unknown[];
}

/** What MikroORM 7's PostgreSQL connection offers beyond its kysely client. */
interface PgConnectionLike {
  getNativeClient(): Promise<PgPool>;
  readonly options?: { readonly onCreateConnection?: unknown; readonly onReserveConnection?: unknown; readonly driverOptions?: unknown };
}

/**
 * Whether `em`'s unit transactions go on a connection the library holds itself ({@link holdPgTransaction}): MikroORM 7
 * on PostgreSQL with the pg pool MikroORM builds, where nothing must run on a connection when kysely hands it out.
 * With `onCreateConnection`, `onReserveConnection` or `sessionContext: 'connection'` configured, MikroORM runs
 * statements there (a session's settings, a row-level security context); with a kysely dialect or Kysely instance
 * of the application's as `driverOptions`, the pool and its hooks are the application's. The transaction is then
 * kysely's, as before. The answer holds for every EntityManager of one MikroORM instance: ask once.
 */
export function holdsPgTransactions(em: EntityManager, kysely: KyselyLike): boolean {
  const connection = em.getConnection('write') as unknown as Partial<PgConnectionLike> & object;
  const config = em.config as unknown as { get(key: string): unknown };
  return (
    typeof connection.getNativeClient === 'function' &&
    isPostgreSqlConnection(connection) &&
    typeof kysely.getExecutor()?.withConnectionProvider === 'function' &&
    config.get('onCreateConnection') == null &&
    config.get('onReserveConnection') == null &&
    config.get('sessionContext') !== 'connection' &&
    connection.options?.onCreateConnection == null &&
    connection.options?.onReserveConnection == null &&
    !ownedByApplication(connection.options?.driverOptions ?? config.get('driverOptions'))
  );
}

/** `driverOptions` that hand MikroORM 7 a dialect or Kysely instance (or a function making one) instead of pool options. */
function ownedByApplication(driverOptions: unknown): boolean {
  if (typeof driverOptions === 'function') return true;
  if (driverOptions === null || typeof driverOptions !== 'object') return false;
  return 'createDriver' in driverOptions || typeof (driverOptions as { getExecutor?: unknown }).getExecutor === 'function';
}

function isPostgreSqlConnection(connection: object): boolean {
  for (let proto = Object.getPrototypeOf(connection); proto; proto = Object.getPrototypeOf(proto)) {
    if (proto.constructor?.name === 'PostgreSqlConnection') return true;
  }
  return false;
}

/**
 * Takes a connection from MikroORM's pg pool and makes it `em`'s transaction context; BEGIN goes with the first
 * statement sent in it. Its `end` closes the context and hands the connection back (`broken`: the transaction may
 * still be open on it, so the pool closes it). Rejects when no connection can be had; undefined, with nothing taken,
 * when MikroORM does not hand out its pool after all (its `getNativeClient()` refuses): `em`'s transactions are then
 * kysely's (take {@link holdsPgTransactions} as false from then on).
 */
export async function holdPgTransaction(em: EntityManager, kysely: KyselyLike): Promise<ConnectionHold | undefined> {
  const connection = em.getConnection('write') as unknown as PgConnectionLike & object;
  let pool: PgPool;
  try {
    pool = await connection.getNativeClient();
  } catch {
    return undefined;
  }
  const client = await pool.connect();
  const held: HeldTransaction = {
    context: {},
    open: true,
    foldsStatements: true,
    log: (sql) => logQuery(em, sql),
    beginPending: true,
    pending: [],
    commitPending: false,
    committed: false,
    commitSending: false,
  };
  let context: object;
  try {
    context = heldKysely(kysely, heldConnection(pool, client, held));
  } catch (error) {
    client.release();
    throw error;
  }
  (held as { context: object }).context = context;
  em.setTransactionContext(context as never);
  const end = (broken = false) => {
    held.open = false;
    held.beginPending = false;
    em.resetTransactionContext();
    client.release(broken ? new Error("the unit of work's transaction was not ended") : undefined);
  };
  return { end, held };
}

/**
 * The kysely connection of a held transaction: sends each statement with what waits to go before it (BEGIN, a
 * SAVEPOINT, a lock bound) and, when asked, COMMIT after it, in one string; answers with the statement's own result
 * and keeps every statement's answer in `held.answers`. A statement with parameters (a typed kysely query) goes
 * alone, after what waited, and never carries COMMIT. A statement in flight can be canceled, or its session ended,
 * from another connection of `pool` (kysely's `inflightQueryAbortStrategy`), as on kysely's own connections.
 */
function heldConnection(pool: PgPool, client: PgClient, held: HeldTransaction): KyselyConnection {
  let sent = 0;
  let running: number | undefined;
  const send = async (sql: string, parameters: readonly unknown[]): Promise<PgResult[]> => {
    if (!held.open) throw new Error(TRANSACTION_ENDED);
    const id = ++sent;
    running = id;
    try {
      return await sendWithUnsent(client, held, sql, parameters);
    } finally {
      if (running === id) running = undefined;
    }
  };
  /** Runs `pg_cancel_backend` or `pg_terminate_backend` on the connection's session, if a statement is still in flight. */
  const control = async (fn: 'pg_cancel_backend' | 'pg_terminate_backend') => {
    const target = running;
    const pid = (client as { processID?: unknown }).processID;
    if (target === undefined || typeof pid !== 'number') return;
    const other = await pool.connect();
    try {
      // The statement may have ended while a connection was found: another one must not be canceled for it.
      if (running === target) await other.query(`select ${fn}(${pid})`, []);
    } finally {
      other.release();
    }
  };
  let cursors = 0;
  return {
    async executeQuery(query) {
      const result = (await send(query.sql, query.parameters)).at(-1) ?? {};
      const counted =
        result.command === 'INSERT' || result.command === 'UPDATE' || result.command === 'DELETE' || result.command === 'MERGE';
      return { rows: result.rows ?? [], numAffectedRows: counted ? BigInt(result.rowCount ?? 0) : undefined };
    },
    cancelQuery: () => control('pg_cancel_backend'),
    killSession: () => control('pg_terminate_backend'),
    streamQuery: (query, chunkSize = 100) => streamRows(send, held, () => `saga_stream_${++cursors}`, query, chunkSize),
  };
}

/**
 * Sends `sql` on `client` with what waits to go before it (BEGIN, a SAVEPOINT, a lock bound) and, when asked, COMMIT
 * after it, in one string (a statement with parameters goes alone, after what waited, and never carries COMMIT);
 * answers with the statement's own results and keeps them in `held.answers`.
 */
async function sendWithUnsent(client: PgClient, held: HeldTransaction, sql: string, parameters: readonly unknown[]): Promise<PgResult[]> {
  const prefix = takeUnsent(held);
  const commit = prefix.length > 0 && held.commitPending;
  held.commitPending = false;
  let own: PgResult[];
  if (parameters.length > 0) {
    if (prefix.length > 0) await client.query(prefix.join('; '));
    own = listOf(await client.query(sql, parameters));
  } else if (prefix.length === 0) {
    own = listOf(await client.query(sql, []));
  } else {
    // COMMIT starts a line of its own: a statement ending in a line comment (an `onQuery` hook's tag) would
    // otherwise turn it into part of the comment, and the transaction would stay open on the pooled connection.
    const all = listOf(await client.query([...prefix, sql].join('; ') + (commit ? `\n; ${COMMIT_SQL}` : ''), []));
    if (commit) {
      const committedAs = all.at(-1)?.command ?? undefined;
      if (committedAs !== 'COMMIT' && committedAs !== 'ROLLBACK') {
        // The last statement run was not COMMIT: the transaction's state is unknown; it is not taken for ended.
        throw new Error(`the statement sent with COMMIT was answered with ${committedAs ?? 'nothing'} last, not COMMIT`);
      }
      held.committed = true;
      held.committedAs = committedAs;
    }
    own = all.slice(prefix.length, commit ? -1 : undefined);
  }
  if (held.commitSending) {
    held.commitSending = false;
    held.committedAs = own.at(-1)?.command ?? undefined;
  }
  held.answers = own.map((result) => ({ affectedRows: result.rowCount ?? 0, rows: result.rows ?? [] }));
  return own;
}

/**
 * `em.stream()` in the transaction: a cursor of the transaction's own (named by `cursorName`), read `chunkSize` rows at a time.
 * PostgreSQL declares cursors for SELECT and VALUES only: any other statement (UPDATE ... RETURNING) runs whole, its
 * rows handed out `chunkSize` at a time.
 */
async function* streamRows(
  send: (sql: string, parameters: readonly unknown[]) => Promise<PgResult[]>,
  held: HeldTransaction,
  cursorName: () => string,
  query: CompiledQuery,
  chunkSize: number,
): AsyncIterableIterator<{ readonly rows: unknown[] }> {
  const size = Math.max(1, Math.floor(chunkSize));
  if (!CURSOR_STATEMENT.test(query.sql)) {
    const [result] = (await send(query.sql, query.parameters)).slice(-1);
    const rows = result?.rows ?? [];
    for (let at = 0; at < rows.length; at += size) yield { rows: rows.slice(at, at + size) };
    return;
  }
  const name = cursorName();
  await send(`declare ${name} no scroll cursor for ${query.sql}`, query.parameters);
  try {
    for (;;) {
      const [result] = await send(`fetch forward ${size} from ${name}`, []);
      const rows = result?.rows ?? [];
      if (rows.length === 0) return;
      yield { rows };
    }
  } finally {
    if (held.open) await send(`close ${name}`, []).catch(() => undefined);
  }
}

/** A statement PostgreSQL declares a cursor for: SELECT or VALUES, after leading blanks, comments and parentheses. */
const CURSOR_STATEMENT = /^(?:\s|\(|--[^\n]*\n|\/\*[\s\S]*?\*\/)*(?:select|values)\b/i;

function listOf(answer: PgResult | PgResult[]): PgResult[] {
  return Array.isArray(answer) ? answer : [answer];
}
