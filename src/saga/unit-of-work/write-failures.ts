/** What a statement does, for error messages: never its SQL or parameters. */
export type StatementOperation = 'read' | 'lock' | 'begin' | 'insert' | 'update' | 'delete' | 'savepoint' | 'notify' | 'commit';

/** Another unit of work changed the saga between our read and our write. */
export class VersionConflict extends Error {}

/** The timer or staged delivery being delivered lost its claim (a timer cancelled, replaced or fired meanwhile; a row another dispatcher took over after the lease ran out). */
export class StaleClaim extends Error {}

/** A statement (or BEGIN, or COMMIT) failed; `cause` is the driver's error. */
export class StatementFailure extends Error {
  constructor(
    readonly operation: StatementOperation,
    /** The table the statement touched; undefined for BEGIN and COMMIT. */
    readonly table: string | undefined,
    override readonly cause: unknown,
    /** How long the statement ran before it failed, in milliseconds. */
    readonly elapsedMs: number,
    /** A second table the statement wrote, when it wrote two. */
    readonly alsoTable?: string,
  ) {
    super(`${operation} ${table ?? ''}${alsoTable ? ` and ${alsoTable}` : ''} failed`);
  }
}

/** Runs `fn`; what it throws (other than the write phase's own signals) becomes a {@link StatementFailure}. */
export async function runNamed<T>(
  operation: StatementOperation,
  table: string | undefined,
  fn: () => Promise<T>,
  alsoTable?: string,
): Promise<T> {
  const started = performance.now();
  try {
    return await fn();
  } catch (error) {
    if (error instanceof VersionConflict || error instanceof StaleClaim || error instanceof StatementFailure) throw error;
    throw new StatementFailure(operation, table, error, Math.round(performance.now() - started), alsoTable);
  }
}
