import { context as otelContext } from '@opentelemetry/api';
import type { DispatchPassResult } from '../contracts.js';
import { markPublished } from '../sql/delivery-statements.js';
import { DISPATCH_TABLES } from '../sql/dispatch-tables.js';
import { DELIVERY_OUTCOMES, DeliverySpan } from '../telemetry/delivery-span.js';
import { describeError as describe } from '../telemetry/describe-error.js';
import { SPAN_ATTRIBUTES } from '../telemetry/span-attributes.js';
import { traceHeaders, withTraceHeaders } from '../telemetry/trace-context.js';
import { type ClaimedOutboxRow, claimDueOutboxRows } from './claim-due-rows.js';
import { CoalescedWrite } from './coalesced-write.js';
import type { DispatchParts } from './dispatch-parts.js';
import { type HeldRow, heldOutboxRow, type Mutable } from './held-row.js';
import { RowLockedElsewhere } from './pending-outcomes.js';
import type { Stamping } from './row-deliveries.js';

/** The outbox counters of the pass being run. */
type OutboxCounts = Mutable<DispatchPassResult['outbox']>;

/**
 * Relays the outbox: claims due outbox rows under a lease, hands each to the publisher, and stamps the published
 * rows, those published together in one statement.
 */
export class OutboxRelay {
  /** Published stamps of the messages published together: one statement. */
  private readonly published: CoalescedWrite;

  constructor(private readonly parts: DispatchParts) {
    const { context, options } = parts;
    this.published = new CoalescedWrite((claims) => markPublished(context, claims, options.clock.now()));
  }

  /**
   * Claims due outbox rows and publishes them; their published stamps are pushed to `stamps`. When the pool is
   * idle, the claim holds all its slots and marks started, in the claim statement itself, the rows that then start
   * at once (the head of each saga's lane, up to `publishConcurrency`), instead of a start-mark statement of their own.
   */
  async claimAndPublish(signal: AbortSignal | undefined, counts: OutboxCounts, stamps: Promise<void>[]): Promise<void> {
    const { context, options, events, pool, leases, rest, outcomes, deliveries } = this.parts;
    const table = DISPATCH_TABLES.outbox;
    const at = options.clock.now();
    const leaseUntil = new Date(at.getTime() + options.leaseMs);
    const stepsBefore = rest.stepsRun;
    const reservation = pool.reserve(table);
    const startAtClaim = reservation && { upTo: options.publishConcurrency, maxAttempts: options.maxAttempts };
    let claimed: Awaited<ReturnType<typeof claimDueOutboxRows>>;
    try {
      claimed = await claimDueOutboxRows(context, at, leaseUntil, options.batchSize, deliveries.claimGuard(table, at), startAtClaim);
    } catch (error) {
      if (reservation) pool.release(reservation);
      throw error;
    }
    const { rows, undecodable } = claimed;
    counts.claimed = rows.length + undecodable.length;
    // Empty while a step ran meanwhile is not at rest: the step may have sent a message this claim missed.
    rest.noteClaim(table, at, counts.claimed === 0 && rest.stepsRun === stepsBefore);
    if (counts.claimed > 0) {
      events.emit('claimed', { table, ids: [...rows.map((r) => r.envelope.id), ...undecodable.map((r) => r.id)], at, leaseUntil });
    }
    // The rows started by the claim go first: they are the heads of their lanes, and start before submit returns.
    const ordered = [...rows.filter((row) => row.startedAtClaim), ...rows.filter((row) => !row.startedAtClaim)];
    const held = ordered.map((row) => ({ row, claim: heldOutboxRow(row) }));
    leases.hold(
      table,
      held.map((h) => h.claim),
    );
    const delivered = pool.submit(
      held.map(({ row, claim }) =>
        deliveries.task(table, claim, signal, counts, () => this.publishOne(row, claim, counts, stamps), row.startedAtClaim),
      ),
      reservation,
    );
    // After the submit: rows the claim marked started must not wait on these statements.
    await outcomes.retireUndecodable(undecodable, counts);
    await delivered;
  }

  /**
   * Publishes one claimed row in its `saga.publish` span, a child of the trace context stored with the row; the
   * envelope's headers carry that span's context (`traceparent`) to the consumer. Its published stamp, written with
   * the others of its pass in one statement, is pushed to `stamps`: the delivery (and its pool slot) ends when the
   * publisher returned.
   */
  private async publishOne(
    claimed: ClaimedOutboxRow,
    row: HeldRow,
    counts: OutboxCounts,
    stamps: Promise<void>[],
  ): Promise<Stamping | undefined> {
    const { options, metrics, tracer, outcomes, deliveries } = this.parts;
    if (!claimed.startedAtClaim && !(await deliveries.start(DISPATCH_TABLES.outbox, row, counts))) return;
    const span = DeliverySpan.publish(tracer, claimed.envelope, claimed.trace);
    // The trace headers win over a step's header of the same name, in any case: they say where the message was
    // published from.
    const envelope = { ...claimed.envelope, headers: withTraceHeaders(claimed.envelope.headers, traceHeaders(span.context)) };
    try {
      await deliveries.withTimeout(() => otelContext.with(span.context, () => options.publish!(envelope)), envelope.correlationId);
    } catch (error) {
      span.failed(await outcomes.deliveryFailed(DISPATCH_TABLES.outbox, row, error, counts), error);
      return;
    }
    const latency = (options.clock.now().getTime() - envelope.createdAt.getTime()) / 1000;
    span.setAttribute(SPAN_ATTRIBUTES.outboxLatency, latency);
    span.ended(DELIVERY_OUTCOMES.PUBLISHED);
    metrics.record('outboxLatency', latency, { [SPAN_ATTRIBUTES.sagaType]: envelope.sagaType });
    counts.published++;
    metrics.add('messagesPublished', envelope.sagaType);
    const stamped = this.stampPublished(row, envelope.id);
    stamps.push(stamped);
    return { stamped };
  }

  /**
   * Stamps a published row published (token-checked); when the database cannot take it, or another transaction
   * holds the row locked (PostgreSQL: the stamp does not wait for it), keeps it for the next pass.
   */
  private stampPublished(row: HeldRow, id: string): Promise<void> {
    const { logger } = this.parts.options;
    // Without async wrappers: one stamp per published row, and every promise counts at the relay's rate.
    const write = () =>
      this.published.submit(row).then((outcome) => {
        if (outcome === 'busy') throw new RowLockedElsewhere();
        return outcome;
      });
    return write().then(
      (outcome) => {
        // The lease ran out and another dispatcher took the row: it will publish again (at-least-once).
        if (outcome === 'lost') logger.warn('outbox message was published after its lease ended; it may be published again', { id });
      },
      (error: unknown) => {
        this.parts.pending.keep(DISPATCH_TABLES.outbox, row, write, true);
        if (error instanceof RowLockedElsewhere) {
          logger.warn('outbox message was published, but another transaction holds its row locked; it is stamped at a later pass', { id });
        } else {
          logger.warn('outbox message was published but could not be stamped yet; it is stamped at the next pass', {
            id,
            error: describe(error),
          });
        }
      },
    );
  }
}
