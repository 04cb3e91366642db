import { DISPATCH_TABLES, type DispatchTable } from '../sql/dispatch-tables.js';

/**
 * Which tables the loop leaves unclaimed for a while: one whose last claim came back empty rests for
 * `pollIntervalMs`, while the other table keeps the loop busy. It then costs no claim statement per pass, and a row
 * that becomes due there waits at most about a poll interval, as it would with the loop idle.
 */
export class TableRest {
  /**
   * When a claim of each table last came back empty (the clock's milliseconds); absent once one found rows. The
   * loop claims such a table again only after `pollIntervalMs`, while the other table keeps it busy.
   */
  private readonly foundEmptyAt: Partial<Record<DispatchTable, number>> = {};
  /** Steps this dispatcher ran (timers fired, staged deliveries delivered): a step may send messages, which the next pass publishes. */
  private ran = 0;

  constructor(private readonly pollIntervalMs: number) {}

  /** Steps run so far: an empty outbox claim during which one ran does not put the outbox at rest. */
  get stepsRun(): number {
    return this.ran;
  }

  /** A timer fired or a staged delivery was delivered: its step may have sent messages, so the outbox rests no longer. */
  stepRan(): void {
    this.ran++;
    delete this.foundEmptyAt[DISPATCH_TABLES.outbox];
  }

  /** Rows of `table` became due (a unit of work of this process committed them): it rests no longer. */
  rowsDue(table: DispatchTable): void {
    delete this.foundEmptyAt[table];
  }

  /** Notes whether a claim of `table` at `at` came back empty, for {@link tablesAtRest}. */
  noteClaim(table: DispatchTable, at: Date, empty: boolean): void {
    if (empty) this.foundEmptyAt[table] = at.getTime();
    else delete this.foundEmptyAt[table];
  }

  /** The tables the loop leaves unclaimed in its next pass: those whose last claim, less than `pollIntervalMs` ago, came back empty. */
  tablesAtRest(now: Date): Set<DispatchTable> {
    const atRest = new Set<DispatchTable>();
    for (const table of Object.values(DISPATCH_TABLES)) {
      if (this.restOf(table, now) > 0) atRest.add(table);
    }
    return atRest;
  }

  /** When the first of `tables` stops resting, ms from `now` (infinite for none): a pass that left them out is overtaken then. */
  restLeft(tables: ReadonlySet<DispatchTable>, now: Date): number {
    let left = Number.POSITIVE_INFINITY;
    for (const table of tables) left = Math.min(left, this.restOf(table, now));
    return left;
  }

  /**
   * How long `table` still rests at `now`, ms (0 when it does not). A clock that stepped back since the empty claim
   * ends the rest: measured on it, the rest would last as long as the step.
   */
  private restOf(table: DispatchTable, now: Date): number {
    const at = this.foundEmptyAt[table];
    if (at === undefined) return 0;
    const since = now.getTime() - at;
    return since < 0 ? 0 : Math.max(0, this.pollIntervalMs - since);
  }
}
