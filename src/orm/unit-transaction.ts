import type { EntityManager } from '@mikro-orm/core';

/*
 * What a unit of work needs from its transaction, as one interface. MikroORM's majors hold a transaction
 * differently (6 through knex, 7 through kysely or the pg pool MikroORM builds): one implementation per major
 * (`mikro-orm-6/`, `mikro-orm-7/`), chosen once when a runtime's database context is built
 * (`createUnitTransactions`).
 */

/** One statement with `?` placeholders and its parameters. */
export interface SqlStatement {
  readonly sql: string;
  readonly params: readonly unknown[];
}

/** What the database answered to one statement of several sent together. */
export interface StatementAnswer {
  readonly affectedRows: number;
  readonly rows: unknown[];
}

/** How units of work hold their transactions on the installed MikroORM major. */
export interface UnitTransactions {
  /**
   * Opens a transaction on `em` (a unit of work's or a group's fork). End it with {@link UnitTransaction.commit}, or
   * with {@link UnitTransaction.rollback} after anything failed, a failed commit included. The transaction events
   * MikroORM's own `em.begin()`, `em.commit()` and `em.rollback()` fire reach `em`'s subscribers the same way.
   */
  begin(em: EntityManager): Promise<UnitTransaction>;
  /**
   * Whether several statements can go to the database in one round trip as one string
   * ({@link UnitTransaction.runStatementsTogether}) in a transaction {@link begin} opens on `em`: PostgreSQL, whose
   * simple query protocol runs them in order and answers each, where the library holds the transaction itself.
   */
  runsStatementsTogether(em: EntityManager): boolean;
  /**
   * Runs one statement on `em` (outside any transaction: a fork of its own) with `settings` (statements without
   * parameters or results, such as `set local ...`) in force for it alone, and returns its rows. Fires none of
   * MikroORM's transaction events. Settings are for PostgreSQL (`DialectAdapter.claimSettings`): with none the
   * statement is sent alone.
   */
  queryRowsUnder<T>(em: EntityManager, settings: readonly string[], sql: string, params: readonly unknown[]): Promise<T[]>;
  /**
   * Joins the transaction `appEm` (the application's EntityManager) has open: the one of its `em.transactional()`
   * callback, or opened by `em.begin()`. `unitEm` (a unit of work's fresh fork) then runs its statements in it, on its
   * connection, after a savepoint of the unit's own ({@link JoinedTransaction}). Undefined, with nothing sent, when
   * `appEm` is in no transaction, or in one that has ended (committed or rolled back).
   */
  join(appEm: EntityManager, unitEm: EntityManager): Promise<JoinedTransaction | undefined>;
  /**
   * What stands for the connection of the transaction `appEm` has open, while it is open: the same object for the
   * context of a transaction nested in it (a savepoint on the same connection) as for its own. Undefined, with
   * nothing sent, when `appEm` is in no transaction. Two units joined to one connection at once would interleave
   * their statements, and one's rollback to its savepoint would undo the other's writes.
   */
  connectionOf(appEm: EntityManager): Promise<object | undefined>;
}

/** A transaction {@link UnitTransactions.begin} opened on its EntityManager. */
export interface UnitTransaction {
  /** The EntityManager the transaction was opened on. */
  readonly em: EntityManager;
  /**
   * Commits. When this fails, call {@link rollback}. Flush `em` first: COMMIT follows without another flush (where
   * MikroORM's own `em.commit()` is used, its flush finds nothing). The beforeTransactionCommit subscribers run
   * first; when one throws, COMMIT is not sent and this rejects with {@link CommitNotSent}. afterTransactionCommit
   * runs once COMMIT was applied: what it throws passes on as {@link CommitSubscriberThrew} where the library sent
   * COMMIT, as is where MikroORM's own `em.commit()` did. Rejects with {@link CommitRolledBack} when the database
   * answered COMMIT with ROLLBACK.
   */
  commit(): Promise<void>;
  /**
   * Rolls back; the connection goes back to the pool even when this fails. ROLLBACK is sent even when a
   * beforeTransactionRollback subscriber throws (what it threw passes on afterwards): the connection goes back to
   * the pool and carries the next unit, which must not find this transaction still open.
   */
  rollback(): Promise<void>;
  /**
   * Asks for COMMIT to go with the next statement sent in the transaction, in the same round trip: true when it
   * will. Only where that statement is the transaction's first and its last (BEGIN not sent yet) and no subscriber
   * listens to the transaction's end. The caller must send nothing after it but {@link commit} (which then sends
   * nothing), or {@link rollback} when the statement's result refuses the unit: the statement was all the
   * transaction wrote, so committing a statement that changed no row writes nothing. What the statement throws
   * without a server's error may have come after COMMIT was applied: its outcome is unknown.
   */
  commitWithNextStatement(): boolean;
  /** Whether the transaction ended with the statement that carried its COMMIT ({@link commitWithNextStatement}). */
  readonly committedWithStatement: boolean;
  /** Whether a statement given to {@link sendWithNextStatement} waits for the next one. */
  readonly foldsStatements: boolean;
  /**
   * Sends `sql` (a statement of the library's own without parameters, whose result is not needed: SAVEPOINT, a lock
   * bound) in the transaction: with the next statement sent in it, in the same round trip, where it
   * {@link foldsStatements}; elsewhere now, through `via` (an EntityManager {@link join}ed to the transaction; `em`
   * by default). Failing there, it fails that statement. A statement still waiting to go can be taken back
   * ({@link withdrawUnsent}); one still waiting at COMMIT or ROLLBACK is dropped.
   */
  sendWithNextStatement(sql: string, via?: EntityManager): Promise<void>;
  /** Takes back `sql` if {@link sendWithNextStatement} still holds it unsent; true when it did (it never ran). */
  withdrawUnsent(sql: string): boolean;
  /**
   * Sends `statements` in one round trip, in the transaction (with what waits to go with the next statement), and
   * answers each with its row count and rows. Only where {@link UnitTransactions.runsStatementsTogether}. The
   * database runs them in order and stops at the first that fails, whose error this throws: the statements before
   * it ran, so the transaction must be rolled back (or back to a savepoint set before them).
   */
  runStatementsTogether(statements: readonly SqlStatement[]): Promise<readonly StatementAnswer[]>;
  /**
   * Makes `other` (a unit of work's fork) run its statements, its flush included, in this transaction: MikroORM's
   * UnitOfWork opens no transaction of its own while its EntityManager is in one (6 and 7). Undo with
   * {@link leave} before the transaction commits or rolls back.
   */
  join(other: EntityManager): void;
  /** Takes `other` out of the transaction {@link join} put it in; the transaction itself goes on. */
  leave(other: EntityManager): void;
}

/**
 * A unit of work's statements inside a transaction the application has open ({@link UnitTransactions.join}), after a
 * savepoint of their own. {@link commit} releases the savepoint: the unit's writes become part of the application's
 * transaction, durable only when the application commits it, gone when it rolls back. {@link rollback} rolls back to
 * the savepoint and releases it: the application's transaction goes on without them. Neither ends the application's
 * transaction, and neither fires transaction events (the application's transaction fires its own when it ends).
 * Nothing is folded or sent together: {@link commitWithNextStatement} is always false.
 */
export interface JoinedTransaction extends UnitTransaction {
  /** The application's transaction context the unit joined. */
  readonly context: object;
  /**
   * Whether the application's transaction is still open: false once the application committed or rolled it back,
   * the unit's statements then fail. Those sent before are durable when it committed.
   */
  readonly open: boolean;
  /**
   * Rolls the unit's statements back to its savepoint and keeps the savepoint (ROLLBACK TO SAVEPOINT): on PostgreSQL
   * the transaction takes statements again after one of them failed.
   */
  undo(): Promise<void>;
}

/** A beforeTransactionCommit subscriber threw: COMMIT was not sent, and the transaction is still open. */
export class CommitNotSent extends Error {
  constructor(override readonly cause: unknown) {
    super('a beforeTransactionCommit subscriber threw; COMMIT was not sent');
  }
}

/** An afterTransactionCommit subscriber threw (its error is the `cause`) once the database answered COMMIT. */
export class CommitSubscriberThrew extends Error {
  constructor(override readonly cause: unknown) {
    super('an afterTransactionCommit subscriber threw once COMMIT was answered');
  }
}

/**
 * The database ended the transaction with ROLLBACK when it was sent COMMIT (PostgreSQL, after a statement of it
 * failed and the error was caught, by a subscriber for instance): nothing of it was written.
 */
export class CommitRolledBack extends Error {
  constructor() {
    super('the database rolled the transaction back at COMMIT: a statement of it had failed');
  }
}
