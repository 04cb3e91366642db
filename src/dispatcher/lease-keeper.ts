import type { DatabaseContext } from '../sql/database-context.js';
import { renewLeases } from '../sql/delivery-statements.js';
import { type Claim, DISPATCH_TABLES, type DispatchTable } from '../sql/dispatch-tables.js';
import { describeError } from '../telemetry/describe-error.js';
import type { SagaLogger } from '../telemetry/logger.js';
import { type Clock, ENDED } from '../time/clock.js';

/** What one lease renewal did. */
export interface LeaseRenewal {
  readonly table: DispatchTable;
  /** Rows whose lease now ends at `leaseUntil`. */
  readonly renewed: readonly string[];
  /** Rows another dispatcher took over, or that left the pending set: not to be delivered by this one. */
  readonly lost: readonly string[];
  /**
   * Rows another transaction holds locked (PostgreSQL; an operator's open transaction): their lease was not extended
   * this time, and they are still held.
   */
  readonly busy?: readonly string[];
  readonly leaseUntil: Date;
}

/** Settings of a {@link LeaseKeeper}. */
export interface LeaseKeeperOptions {
  readonly clock: Clock;
  readonly leaseMs: number;
  readonly logger: SagaLogger;
  readonly onRenewed: (renewal: LeaseRenewal) => void;
}

/**
 * Keeps the leases of the rows a dispatcher holds (claimed and not finished: waiting for a slot or being
 * delivered) from running out: every `leaseMs / 3` of the clock it extends them to `now + leaseMs`, in one
 * statement per table. Each table's renewals run on their own, so a slow renewal of one table never delays the
 * other's. A row another transaction holds locked is not waited for: it stays held, reported busy. A claim the renewal no longer finds was taken over (its lease ran out while the
 * database could not be reached) and is reported lost, so its row is not delivered or published again.
 */
export class LeaseKeeper {
  // Keyed by claim token, not id: every claim draws a new random token, so a row claimed again is another claim,
  // and ending one must not end the renewal of the other.
  private readonly held: Record<DispatchTable, Map<string, Claim>> = {
    saga_timer: new Map(),
    saga_outbox: new Map(),
    saga_inbox: new Map(),
  };
  private readonly lost: Record<DispatchTable, Set<string>> = { saga_timer: new Set(), saga_outbox: new Set(), saga_inbox: new Set() };
  private readonly stoppers: Record<DispatchTable, AbortController | undefined> = {
    saga_timer: undefined,
    saga_outbox: undefined,
    saga_inbox: undefined,
  };

  constructor(
    private readonly db: DatabaseContext,
    private readonly options: LeaseKeeperOptions,
  ) {}

  /** Starts keeping the leases of `claims`. */
  hold(table: DispatchTable, claims: readonly Claim[]): void {
    const held = this.held[table];
    for (const claim of claims) held.set(claim.token, { id: claim.id, token: claim.token });
    if (claims.length > 0 && !this.stoppers[table]) {
      const stopper = new AbortController();
      this.stoppers[table] = stopper;
      void this.run(table, stopper.signal);
    }
  }

  /** Stops keeping a claim's lease: its delivery ended (or it was given back). */
  let(table: DispatchTable, claim: Claim): void {
    this.held[table].delete(claim.token);
    this.lost[table].delete(claim.token);
    if (this.held[table].size === 0) this.stopTable(table);
  }

  /** Whether a renewal found the row taken over since it was claimed. */
  isLost(table: DispatchTable, claim: Claim): boolean {
    return this.lost[table].has(claim.token);
  }

  /** Ids of the rows held in `table`: a claim of this dispatcher leaves them alone. */
  heldIds(table: DispatchTable): string[] {
    return [...this.held[table].values()].map((claim) => claim.id);
  }

  /** Ends the renewals (the leases then run out by themselves). */
  stop(): void {
    for (const table of Object.values(DISPATCH_TABLES)) this.stopTable(table);
  }

  private stopTable(table: DispatchTable): void {
    this.stoppers[table]?.abort(ENDED);
    this.stoppers[table] = undefined;
  }

  /** Renews the leases held in `table` until `signal` aborts. */
  private async run(table: DispatchTable, signal: AbortSignal): Promise<void> {
    const { clock, leaseMs } = this.options;
    while (!signal.aborted) {
      await clock.sleep(leaseMs / 3, signal);
      if (signal.aborted) return;
      const renewal = await this.renew(table);
      // Reported right before the next sleep starts: a listener that moves a fake clock on hearing of a renewal
      // wakes the next one.
      if (renewal) this.options.onRenewed(renewal);
    }
  }

  private async renew(table: DispatchTable): Promise<LeaseRenewal | undefined> {
    const claims = [...this.held[table].values()];
    if (claims.length === 0) return undefined;
    const leaseUntil = new Date(this.options.clock.now().getTime() + this.options.leaseMs);
    let kept: Set<string>;
    let busy: Set<string>;
    try {
      const answer = await renewLeases(this.db, table, claims, leaseUntil);
      kept = new Set(answer.written);
      busy = new Set(answer.busy);
    } catch (error) {
      // The database is unreachable: the leases may run out; whoever takes a row over then re-claims it,
      // and the tokens keep this dispatcher's late commits from applying twice.
      this.options.logger.warn('could not renew leases; another dispatcher may take their rows over once they end', {
        table,
        rows: claims.length,
        error: describeError(error),
      });
      return undefined;
    }
    const lost: string[] = [];
    for (const claim of claims) {
      // A row whose delivery ended while the renewal ran is simply no longer held.
      if (kept.has(claim.id) || busy.has(claim.id) || !this.held[table].has(claim.token)) continue;
      this.held[table].delete(claim.token);
      this.lost[table].add(claim.token);
      lost.push(claim.id);
    }
    if (lost.length > 0) {
      this.options.logger.warn('claims were taken over by another dispatcher; they are not delivered here', {
        table,
        rows: lost.length,
        ids: lost.slice(0, 10),
      });
    }
    if (busy.size > 0) {
      this.options.logger.warn('leases could not be renewed: another transaction holds them locked; they stay held, renewed when it ends', {
        table,
        rows: busy.size,
        ids: [...busy].slice(0, 10),
      });
    }
    return { table, renewed: [...kept], lost, leaseUntil, ...(busy.size > 0 ? { busy: [...busy] } : {}) };
  }
}
