import type { Claim, DispatchTable } from '../sql/dispatch-tables.js';

/** A kept write whose row another transaction still holds locked: not a database fault; kept for a later pass. */
export class RowLockedElsewhere extends Error {
  constructor() {
    super('another transaction holds the row locked');
    this.name = 'RowLockedElsewhere';
  }
}

/** Most undelivered outcomes kept for writing once the database answers again. */
const MAX_PENDING_OUTCOMES = 10_000;

/**
 * A row's outcome (published, failed, dead-lettered, given back) the database could not take when it was
 * decided. Written at the next pass, token-checked (so a row taken over meanwhile is left alone); until then
 * this dispatcher does not claim the row.
 */
interface PendingOutcome {
  readonly table: DispatchTable;
  readonly claim: Claim;
  readonly write: () => Promise<unknown>;
  /** A published stamp: written together with the other kept stamps, in one statement. */
  readonly stamp?: boolean;
}

/** Outcomes the database could not take (it was down): written at the next pass, or by stop(). */
export class PendingOutcomes {
  private outcomes: PendingOutcome[] = [];

  /** How many outcomes are kept. */
  get size(): number {
    return this.outcomes.length;
  }

  /** The ids of the rows whose outcome is kept, of `table` or of every table: claims leave them alone. */
  ids(table?: DispatchTable): string[] {
    return this.outcomes.filter((outcome) => table === undefined || outcome.table === table).map((outcome) => outcome.claim.id);
  }

  /** Keeps a row's outcome the database could not take, for the next pass (and stop()). */
  keep(table: DispatchTable, claim: Claim, write: () => Promise<unknown>, stamp = false): void {
    this.outcomes.push({ table, claim: { id: claim.id, token: claim.token }, write, stamp });
    if (this.outcomes.length > MAX_PENDING_OUTCOMES) this.outcomes.shift();
  }

  /**
   * Writes a row's outcome; when the database cannot take it, keeps it for the next pass (and stop()).
   * @returns the statement's result, or undefined when it was kept.
   */
  async writeOrKeep<T>(table: DispatchTable, claim: Claim, write: () => Promise<T>): Promise<T | undefined> {
    try {
      return await write();
    } catch {
      this.keep(table, claim, write);
      return undefined;
    }
  }

  /**
   * Writes the kept outcomes: the published stamps together (one statement), then the others oldest first; stops at
   * the first the database still refuses (and rethrows). One whose row another transaction still holds locked is
   * kept again, and the others are written.
   */
  async write(): Promise<void> {
    const pending = this.outcomes;
    this.outcomes = [];
    const stamps = pending.filter((outcome) => outcome.stamp);
    const others = pending.filter((outcome) => !outcome.stamp);
    let refused: { error: unknown } | undefined;
    const stamped = await Promise.allSettled(stamps.map((outcome) => outcome.write()));
    for (const [index, result] of stamped.entries()) {
      if (result.status === 'fulfilled') continue;
      this.outcomes.push(stamps[index]!);
      if (!(result.reason instanceof RowLockedElsewhere)) refused ??= { error: result.reason };
    }
    if (refused) {
      this.outcomes.push(...others);
      throw refused.error;
    }
    for (const [index, outcome] of others.entries()) {
      try {
        await outcome.write();
      } catch (error) {
        this.outcomes.push(...others.slice(index));
        throw error;
      }
    }
  }
}
