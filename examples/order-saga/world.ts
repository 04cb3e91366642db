/**
 * The demo's little world: the order saga on a real database, a dispatcher that fires its timers and relays
 * its outbox, and the participants that answer its commands (inventory, payments, shipping, ordering,
 * operations). Time is a fake clock the scenarios move forward, so a 30-second timeout takes no time.
 */
import type { MikroORM } from '@mikro-orm/core';
import { type HandledEvent, type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { advanceAndDrain, drainDueTimers, FakeClock } from '../../src/testing/index.js';
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

/** One scenario's world: runtime, dispatcher, fake clock, participants, and the trace it prints. */
export class OrderWorld {
  readonly clock: FakeClock;
  readonly runtime: SagaRuntime;
  readonly dispatcher: SagaDispatcher;
  readonly lines: string[] = [];
  /** Results of timer deliveries, newest last. */
  readonly timerResults: HandledEvent['result'][] = [];
  private participants: Record<string, Participant> = { ...HAPPY_PARTICIPANTS };
  private readonly replies: OrderMessage[] = [];
  /**
   * The decision of each message's step, by the message's JSON text: the step reads a copy of the message, not
   * the object onHandled gets back.
   */
  private readonly decisions = new Map<string, { from: string; decision: Decision | null }>();

  constructor(
    private readonly orm: MikroORM,
    start: Date,
    hooks: Pick<OrderSagaHooks, 'afterLoad'> = {},
  ) {
    this.clock = new FakeClock(start);
    const saga = createOrderSaga({
      afterLoad: hooks.afterLoad,
      // Retries overwrite: the trace shows the decision of the attempt that committed.
      onDecision: (message, from, decision) => this.decisions.set(JSON.stringify(message), { from, decision }),
    });
    this.runtime = new SagaRuntime({
      em: orm.em,
      sagas: [saga],
      clock: this.clock,
      onHandled: ({ message, result, timer }) => {
        if (timer) this.timerResults.push(result);
        this.trace(message as OrderMessage, result);
      },
    });
    this.dispatcher = new SagaDispatcher({
      runtime: this.runtime,
      logger: silentLogger,
      // The publisher hands each command to its participant; replies are delivered once the pass is over.
      publish: async (envelope: OutboxEnvelope) => {
        const command = envelope.payload as OrderCommand;
        this.replies.push(...(this.participants[command.type]?.(command, (line) => this.say(line)) ?? []));
      },
    });
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

  /** Handles one message, then lets the world settle: outbox relayed, replies delivered, due timers fired. */
  async deliver(message: OrderMessage): Promise<void> {
    await this.runtime.handle(this.runtime.definition('order')!, message);
    await this.settle();
  }

  /** Moves time forward by `ms` and lets the timers that came due fire. */
  async advance(ms: number): Promise<void> {
    await advanceAndDrain(this.clock, this.dispatcher, ms);
    await this.settle();
  }

  /** Relays the outbox and delivers the participants' replies until nothing is left to do. */
  async settle(): Promise<void> {
    for (;;) {
      await drainDueTimers(this.dispatcher);
      const reply = this.replies.shift();
      if (!reply) return;
      await this.runtime.handle(this.runtime.definition('order')!, reply);
    }
  }

  /** Prints the `[saga]` line for one handled message. */
  private trace(message: OrderMessage, result: HandledEvent['result']): void {
    const seen = this.decisions.get(JSON.stringify(message));
    this.decisions.delete(JSON.stringify(message));
    if (result.outcome === 'started') {
      this.say(`[saga] ${message.type}: started -> ${result.step}`);
    } else if (result.outcome !== 'handled' || !seen?.decision) {
      this.say(`[saga] ${message.type} in ${result.step ?? 'no saga'}: ignored`);
    } else {
      const commands = seen.decision.commands.map((c) => c.type).join(', ');
      this.say(`[saga] ${message.type}: ${seen.from} -> ${seen.decision.next}${commands ? ` => ${commands}` : ''}`);
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
