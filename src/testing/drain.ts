import type { DispatchPassResult } from '../contracts.js';
import type { SagaDispatcher } from '../dispatcher/saga-dispatcher.js';
import { countDueRows } from '../sql/claim-statements.js';
import { DISPATCH_TABLES } from '../sql/dispatch-tables.js';
import type { Duration } from '../time/duration.js';
import type { FakeClock } from './fake-clock.js';

/** What {@link drainDueTimers} did: the passes' totals and how the due set shrank. */
export interface DrainReport {
  /** Passes run, the last one finding nothing to claim. */
  readonly passes: number;
  readonly timers: DispatchPassResult['timers'];
  readonly outbox: DispatchPassResult['outbox'];
  /** Staged deliveries (`stageDelivery`): delivered, duplicates, ignored, failed... */
  readonly inbox: DispatchPassResult['inbox'];
  /** Timers due when the drain began. */
  readonly dueBefore: number;
  /** Timers still due when it ended (0 unless rows are leased by another dispatcher). */
  readonly dueAfter: number;
  /**
   * Timers that stopped being due: fired, missed, dead-lettered, dropped as stale, or backed off after a
   * failure. A diagnostic: a timer that advances its saga may cancel sibling timers before they are claimed,
   * so assert on the sagas' state rather than on this number.
   */
  readonly stoppedBeingDue: number;
}

/** Options of {@link drainDueTimers}. */
export interface DrainOptions {
  /**
   * Passes after which the drain gives up with an error (a step that keeps scheduling due timers). Default
   * 1,000 beyond the passes the timers due at the start need at the dispatcher's `batchSize` (on SQLite that
   * is `2 x concurrency` by default, 2 with `concurrency: 1`), plus one per staged delivery due at the start.
   */
  readonly maxPasses?: number;
}

/**
 * Runs dispatcher passes until one finds nothing due (timers, staged deliveries and outbox), without moving the clock.
 * A saga's staged deliveries take a pass each (the next is claimed once the one before left the pending set).
 * The same dispatcher the application runs drains exactly what the application would have fired.
 */
export async function drainDueTimers(dispatcher: SagaDispatcher, options: DrainOptions = {}): Promise<DrainReport> {
  const { clock, batchSize } = dispatcher.options;
  const due = () => countDueRows(dispatcher.context, DISPATCH_TABLES.timer, clock.now());
  const dueBefore = await due();
  // A saga's staged deliveries take a pass each.
  const staged = await countDueRows(dispatcher.context, DISPATCH_TABLES.inbox, clock.now(), true);
  const maxPasses = options.maxPasses ?? 1_000 + Math.ceil(dueBefore / batchSize) + staged;
  const timers = {
    claimed: 0,
    fired: 0,
    stale: 0,
    failed: 0,
    deadLettered: 0,
    missed: 0,
    contended: 0,
    released: 0,
    interrupted: 0,
    lost: 0,
  };
  const outbox = { claimed: 0, published: 0, failed: 0, deadLettered: 0, released: 0, interrupted: 0, lost: 0 };
  const inbox = {
    claimed: 0,
    delivered: 0,
    duplicates: 0,
    ignored: 0,
    stale: 0,
    failed: 0,
    deadLettered: 0,
    contended: 0,
    released: 0,
    interrupted: 0,
    lost: 0,
  };
  for (let passes = 1; ; passes++) {
    const pass = await dispatcher.runOnce();
    for (const key of Object.keys(timers) as (keyof typeof timers)[]) timers[key] += pass.timers[key];
    for (const key of Object.keys(outbox) as (keyof typeof outbox)[]) outbox[key] += pass.outbox[key];
    for (const key of Object.keys(inbox) as (keyof typeof inbox)[]) inbox[key] += pass.inbox[key];
    if (pass.timers.claimed + pass.timers.missed + pass.outbox.claimed + pass.inbox.claimed === 0) {
      const dueAfter = await due();
      return { passes, timers, outbox, inbox, dueBefore, dueAfter, stoppedBeingDue: dueBefore - dueAfter };
    }
    if (passes >= maxPasses) {
      throw new Error(`drainDueTimers: still finding due rows after ${maxPasses} passes; does a step keep scheduling due timers?`);
    }
  }
}

/** Advances the fake clock by `duration`, then drains what came due. */
export async function advanceAndDrain(
  clock: FakeClock,
  dispatcher: SagaDispatcher,
  duration: Duration,
  options: DrainOptions = {},
): Promise<DrainReport> {
  clock.advance(duration);
  return drainDueTimers(dispatcher, options);
}
