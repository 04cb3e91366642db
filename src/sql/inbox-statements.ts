import { createHash } from 'node:crypto';
import type { InboxOutcome } from '../entities/dispatch-states.js';
import type { DatabaseContext } from './database-context.js';
import type { SqlStatement } from './sql-executor.js';

// The statements on `saga_inbox` besides the dispatcher's shared ones: the stamp a unit of work writes in its own
// transaction, and the saga key's lock a stager takes in the application's transaction (PostgreSQL).

/** A claimed staged delivery's stamp: its id, the token it was claimed with, the outcome and when. */
export interface StagedStamp {
  readonly id: string;
  readonly token: string;
  readonly outcome: InboxOutcome;
  readonly at: Date;
}

/**
 * Takes a claimed staged delivery out of the pending set with `outcome`, only while it is still pending under the
 * token the dispatcher claimed it with. Runs in the transaction of the unit of work that delivers it. Changes 1 row
 * when stamped; 0 when another dispatcher took the row over meanwhile (its lease ran out): the unit then rolls back.
 */
export function stampStagedDelivery(db: DatabaseContext, stamp: StagedStamp): SqlStatement {
  const { table, column: c } = db.tables.inbox;
  return {
    sql: `update ${table} set ${c.dispatchedAt} = ?, ${c.outcome} = ?, ${c.lockedUntil} = null
     where ${c.id} = ? and ${c.token} = ? and ${db.dialect.pendingById(c.dispatchedAt)}`,
    params: [stamp.at, stamp.outcome, stamp.id, stamp.token],
  };
}

/** What a stager runs before its row's INSERT, in the application's transaction. */
export interface StagingStatementInput {
  /** The saga whose deliveries are numbered in commit order (a staged delivery); undefined for an outgoing message. */
  readonly saga?: { readonly sagaType: string; readonly sagaKey: string } | undefined;
  /** The channel to NOTIFY at COMMIT (rows due at once, PostgreSQL); undefined for none. */
  readonly notify?: string | undefined;
}

/**
 * The statement a stager runs in the application's transaction before its row's INSERT, or undefined when there is
 * none. Where the database takes transaction-scoped locks (`DialectAdapter.locksSagaKeys`): the saga key's advisory
 * lock, held until COMMIT or ROLLBACK, so two transactions staging for one saga number their rows (the sequence of
 * `order_key`, taken by the INSERT after it) in the order they commit. With `notify`: `pg_notify()`, which PostgreSQL
 * delivers at COMMIT and drops on ROLLBACK.
 */
export function stagingStatement(db: DatabaseContext, input: StagingStatementInput): SqlStatement | undefined {
  const parts: string[] = [];
  const params: unknown[] = [];
  if (input.saga && db.dialect.locksSagaKeys) {
    parts.push('pg_advisory_xact_lock(?, ?)');
    params.push(...sagaKeyLock(db, input.saga.sagaType, input.saga.sagaKey));
  }
  if (input.notify !== undefined && db.dialect.notifiesListeners) {
    parts.push("pg_notify(?, '')");
    params.push(input.notify);
  }
  return parts.length === 0 ? undefined : { sql: `select ${parts.join(', ')}`, params };
}

/**
 * The two 32-bit keys of a saga key's advisory lock: one for the library's inbox table (its schema-qualified name as
 * the metadata has it), one for the saga. PostgreSQL's two-key locks are a space apart from its one-key (bigint)
 * locks, where applications usually take theirs. Two sagas whose keys hash alike only wait for each other's commits.
 */
export function sagaKeyLock(db: DatabaseContext, sagaType: string, sagaKey: string): [number, number] {
  return [int32Of(`mikro-orm-saga:${db.tables.inbox.qualifiedName}`), int32Of(`${sagaType}\u0000${sagaKey}`)];
}

function int32Of(text: string): number {
  return createHash('sha256').update(text, 'utf8').digest().readInt32BE(0);
}
