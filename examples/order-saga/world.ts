/**
 * The demo's little world: the order saga on a real database, the participants that answer its commands
 * (inventory, payments, shipping, ordering, operations), and a relay that hands outbox rows to them.
 */
import type { MikroORM } from '@mikro-orm/core';
import { type Clock, type HandleResult, OUTBOX_OUTCOMES, SagaOutbox, SagaRuntime } from '../../src/index.js';
import { createOrderSaga, type Decision, type OrderCommand, type OrderMessage, type OrderSagaHooks, OrderSagaState } from './order-saga.js';

/** How a participant answers one command: the replies to deliver (it may print a line through `say`). */
export type Participant = (command: OrderCommand, say: (line: string) => void) => OrderMessage[];

/** The participants' default behaviour: everything succeeds. Scenarios override some of them. */
export const HAPPY_PARTICIPANTS: Readonly<Record<OrderCommand['type'], Participant>> = {
  ReserveStock: (c) => [{ type: 'StockReserved', orderId: c.orderId }],
  CapturePayment: (c) => [{ type: 'PaymentCaptured', orderId: c.orderId, amount: (c as { amount: number }).amount }],
  CheckPaymentStatus: () => [],
  CancelOrder: (c, say) => {
    say(`[ordering] order -> Cancelled (${(c as { reason: string }).reason})`);
    return [];
  },
  ReleaseStock: (c, say) => {
    say('[inventory] stock released');
    return [{ type: 'StockReleased', orderId: c.orderId }];
  },
  MarkOrderPaid: (_c, say) => {
    say('[ordering] order -> Paid');
    return [];
  },
  CreateShipment: (c) => [{ type: 'ShipmentCreated', orderId: c.orderId }],
  RefundPayment: (c) => [{ type: 'PaymentRefunded', orderId: c.orderId }],
  AlertOperations: (c, say) => {
    say(`[ops] ALERT: ${(c as { reason: string }).reason}`);
    return [];
  },
};

/** One run of the demo: a runtime over the order saga, a trace, and the participants of the scenario. */
export class OrderWorld {
  readonly runtime: SagaRuntime;
  readonly lines: string[] = [];
  private participants: Record<string, Participant> = { ...HAPPY_PARTICIPANTS };
  private readonly decisions = new Map<OrderMessage, { from: string; decision: Decision | null }>();

  constructor(
    private readonly orm: MikroORM,
    clock: Clock,
    private readonly hooks: Pick<OrderSagaHooks, 'afterLoad'> = {},
  ) {
    const saga = createOrderSaga({
      afterLoad: (message, state) => this.hooks.afterLoad?.(message, state),
      // Retries overwrite: the trace shows the decision of the attempt that committed.
      onDecision: (message, from, decision) => this.decisions.set(message, { from, decision }),
    });
    this.runtime = new SagaRuntime({ em: orm.em, sagas: [saga], clock });
  }

  /** Prints a line of the trace. */
  say(line: string): void {
    this.lines.push(`  ${line}`);
    console.log(`  ${line}`);
  }

  /** Replaces some participants' behaviour for this scenario. */
  withParticipants(overrides: Partial<Record<OrderCommand['type'], Participant>>): this {
    this.participants = { ...HAPPY_PARTICIPANTS, ...overrides } as Record<string, Participant>;
    return this;
  }

  /** Handles one message, prints what the saga did, then relays what it sent (and the replies, recursively). */
  async deliver(message: OrderMessage, options: { relay?: boolean } = {}): Promise<HandleResult> {
    const result = await this.runtime.handle(this.runtime.definition('order')!, message);
    this.trace(message, result);
    if (options.relay !== false) await this.relay();
    return result;
  }

  /** Prints the `[saga]` line for one handled message. */
  trace(message: OrderMessage, result: HandleResult): void {
    const seen = this.decisions.get(message);
    this.decisions.delete(message);
    if (result.outcome === 'started') {
      this.say(`[saga] ${message.type}: started -> ${result.step}`);
    } else if (result.outcome === 'ignored' || result.outcome === 'stale' || !seen?.decision) {
      this.say(`[saga] ${message.type} in ${result.step ?? 'no saga'}: ignored`);
    } else {
      const commands = seen.decision.commands.map((c) => c.type).join(', ');
      this.say(`[saga] ${message.type}: ${seen.from} -> ${seen.decision.next}${commands ? ` => ${commands}` : ''}`);
    }
  }

  /**
   * Hands pending outbox rows to the participants, oldest first, marks them published and delivers the
   * replies. (The dispatcher does this in production; here it is one loop so the trace reads in order.)
   */
  async relay(): Promise<void> {
    for (;;) {
      const em = this.orm.em.fork();
      const pending = await em.find(SagaOutbox, { dispatchedAt: null }, { orderBy: { availableAt: 'asc', id: 'asc' } });
      if (pending.length === 0) return;
      const replies: OrderMessage[] = [];
      for (const row of pending) {
        replies.push(...(this.participants[row.messageType]?.(row.payload as OrderCommand, (line) => this.say(line)) ?? []));
        row.dispatchedAt = this.runtime.options.clock.now();
        row.outcome = OUTBOX_OUTCOMES.PUBLISHED;
      }
      await em.flush();
      for (const reply of replies) await this.deliver(reply, { relay: false });
    }
  }

  /** The article's closing line: `final: <Step>, version <n>`. */
  async final(orderId: string): Promise<string> {
    const saga = await this.orm.em.fork().findOneOrFail(OrderSagaState, { orderId });
    const line = `final: ${saga.step}, version ${saga.version}`;
    this.lines.push(line);
    console.log(line);
    return line;
  }
}
