/*
 * The state of a unit's transaction the library holds on a pooled connection itself (MikroORM 6 through knex, and
 * MikroORM 7 on PostgreSQL through pg: see `compat.ts` and `pg-held-transaction.ts`), shared by both.
 */

/** One unit's transaction on a pooled connection, and the transaction context MikroORM is given for it. */
export interface HeldTransaction {
  /** What `em.getTransactionContext()` returns while the transaction is open. */
  readonly context: object;
  /** Whether the transaction is open; statements sent through `context` otherwise fail. */
  open: boolean;
  /** Whether statements go with the next one, in one round trip (PostgreSQL's simple query protocol). */
  readonly foldsStatements: boolean;
  /** PostgreSQL: BEGIN is not sent yet; the next statement sent through `context` carries it. */
  beginPending: boolean;
  /** Statements to send before the next one, with it (`sendWithNextStatement`). */
  pending: string[];
  /** Writes a statement that waited (BEGIN, a SAVEPOINT, a lock bound) to MikroORM's query log when it is sent. */
  readonly log: (sql: string) => void;
  /** The command tag the database answered COMMIT with (PostgreSQL: `ROLLBACK` when the transaction had aborted). */
  committedAs?: string;
  /** COMMIT goes with the next statement, which is the transaction's only one (`commitWithNextStatement`). */
  commitPending: boolean;
  /** COMMIT went with the transaction's statement: the transaction has ended on the database. */
  committed: boolean;
  /** `commitUnit` is sending COMMIT: the next statement's answer is COMMIT's (`committedAs`). */
  commitSending: boolean;
  /**
   * MikroORM 7: the answers to the statements of the last string sent, one per statement, without those that went
   * with it (BEGIN, what waited, COMMIT); MikroORM's own result carries only one (`runStatementsTogether`).
   */
  answers?: readonly { readonly affectedRows: number; readonly rows: unknown[] }[];
}

/** The transaction contexts the library made for the transactions it holds, and their transactions. */
export const heldContexts = new WeakMap<object, HeldTransaction>();

/** What `commitUnit` sends; the held transaction's client reads the answer to it. */
export const COMMIT_SQL = 'commit';

/** The message of a statement sent in a held transaction after it ended. */
export const TRANSACTION_ENDED = "The unit of work's transaction has ended: no statement can run in it.";

/** The statements waiting to go before the next one (BEGIN first, when not sent yet); they are taken: sent now. */
export function takeUnsent(held: HeldTransaction): string[] {
  const unsent = held.beginPending ? ['begin', ...held.pending] : held.pending;
  held.beginPending = false;
  held.pending = [];
  for (const sql of unsent) held.log(sql);
  return unsent;
}
