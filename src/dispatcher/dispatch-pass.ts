import type { DispatchPassResult } from '../contracts.js';
import type { DispatchTable } from '../sql/dispatch-tables.js';
import { DISPATCH_TABLES } from '../sql/dispatch-tables.js';
import { passWasBusy, recordPassSpan } from '../telemetry/pass-span.js';
import type { DispatchParts } from './dispatch-parts.js';
import { SagaDispatchError } from './dispatch-pass-error.js';
import { emptyPassResult } from './held-row.js';
import { OutboxRelay } from './outbox-relay.js';
import { StagedDeliveries } from './staged-deliveries.js';
import { TimerFiring } from './timer-firing.js';

/**
 * A dispatcher's pass over its tables: the catch-up of overdue timers, then the claims of due timers, staged
 * deliveries and outbox rows at once, their deliveries, and the outbox's published stamps.
 */
export class DispatchPass {
  private readonly timers: TimerFiring;
  private readonly outbox: OutboxRelay;
  private readonly staged: StagedDeliveries;

  constructor(private readonly parts: DispatchParts) {
    this.timers = new TimerFiring(parts);
    this.outbox = new OutboxRelay(parts);
    this.staged = new StagedDeliveries(parts);
  }

  /**
   * One pass. It resolves once the published stamps of its rows are written too; `onlyStamps` is called when
   * every delivery ended and only those stamps are left (the loop then claims again while they are written).
   * The tables in `skipped` are not claimed.
   */
  async run(
    signal: AbortSignal | undefined,
    onlyStamps?: () => void,
    skipped: ReadonlySet<DispatchTable> = new Set(),
  ): Promise<DispatchPassResult> {
    const now = this.parts.options.clock.now();
    // The span's own time, not the dispatcher's clock: a FakeClock's time is no time a trace backend can show.
    const startTime = Date.now();
    const result = emptyPassResult();
    try {
      if (this.parts.options.verifySchema) await this.parts.options.runtime.verifySchemaOnce();
      await this.parts.pending.write();
      result.timers.missed = await this.timers.catchUp(now);
      // The outbox is claimed while the timers are, not after their deliveries: one round trip less per pass.
      // A message a timer of this pass sends is published by the next pass, which starts at once (this one
      // claimed something). A stopping dispatcher claims no more outbox rows only to release them again.
      const stamps: Promise<void>[] = [];
      const timers = skipped.has(DISPATCH_TABLES.timer) ? undefined : this.timers.claimAndFire(now, signal, result.timers);
      // Claimed before the outbox: on one connection (SQLite) the step claims then run before the first publish.
      const staged = skipped.has(DISPATCH_TABLES.inbox) ? undefined : this.staged.claimAndDeliver(now, signal, result.inbox);
      const outbox =
        this.parts.options.publish && !signal?.aborted && !skipped.has(DISPATCH_TABLES.outbox)
          ? this.outbox.claimAndPublish(signal, result.outbox, stamps)
          : undefined;
      const settled = await Promise.allSettled([timers, outbox, staged]);
      if (stamps.length > 0) {
        // A pass that failed (one of its claims) is not overtaken: the loop hears of its failure when its stamps are
        // written, and backs off as after any failed pass.
        if (settled.every((done) => done.status === 'fulfilled')) onlyStamps?.();
        await Promise.all(stamps);
      }
      for (const done of settled) if (done.status === 'rejected') throw done.reason;
    } catch (error) {
      recordPassSpan(this.parts.tracer, startTime, result, error);
      throw new SagaDispatchError(result, error);
    }
    recordPassSpan(this.parts.tracer, startTime, result);
    // Passes that found nothing are not logged: an idle loop would fill the log.
    if (passWasBusy(result))
      this.parts.options.logger.debug('dispatcher pass', { timers: result.timers, outbox: result.outbox, inbox: result.inbox });
    return result;
  }
}
