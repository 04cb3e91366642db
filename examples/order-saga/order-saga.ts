/**
 * The bookstore order saga of the reference article, written with mikro-orm-saga.
 * A pure `decide(state, message)` picks the transition; the steps apply it through the step context.
 */
import { DecimalType, defineEntity } from '@mikro-orm/core';
import { defineSaga, SagaState, SagaStateSchema, type StepContext } from '../../src/index.js';

export const STEPS = [
  'ReservingStock',
  'CapturingPayment',
  'CheckingPayment',
  'CreatingShipment',
  'ReleasingStock',
  'Cancelled',
  'Refunding',
  'Completed',
  'Failed',
] as const;
export type Step = (typeof STEPS)[number];

export const STOCK_TIMEOUT_MS = 60_000;
export const PAYMENT_TIMEOUT_MS = 30_000;
export const SHIPMENT_TIMEOUT_MS = 5 * 60_000;
export const MAX_SHIPMENT_ATTEMPTS = 3;

export class OrderSagaState extends SagaState {
  orderId!: string;
  step: Step = 'ReservingStock';
  total: number = 0;
  /** Attempts in the current step. */
  attempts: number = 1;
}

export const OrderSagaStateSchema = defineEntity({
  class: OrderSagaState,
  extends: SagaStateSchema,
  tableName: 'order_saga',
  properties: {
    orderId: { type: 'string', length: 36, fieldName: 'order_id', unique: true },
    step: { type: 'string', length: 30, fieldName: 'step' },
    total: { type: new DecimalType('number'), precision: 10, scale: 2, fieldName: 'total' },
    attempts: { type: 'integer', fieldName: 'attempts' },
  },
});

/** Messages the saga handles. */
export type OrderMessage =
  | { type: 'OrderPlaced'; orderId: string; total: number; books: string[] }
  | { type: 'StockReserved'; orderId: string }
  | { type: 'OutOfStock'; orderId: string }
  | { type: 'PaymentCaptured'; orderId: string; amount: number }
  | { type: 'PaymentFailed'; orderId: string }
  | { type: 'ShipmentCreated'; orderId: string }
  | { type: 'StockReleased'; orderId: string }
  | { type: 'PaymentRefunded'; orderId: string }
  | { type: 'RefundFailed'; orderId: string; reason: string }
  /** Delivered by the saga's own `timeout` timer; carries the step it was set for. */
  | { type: 'SagaTimedOut'; orderId: string; step: Step };

/** Commands the saga sends through the outbox. */
export type OrderCommand =
  | { type: 'ReserveStock'; orderId: string; books: string[] }
  | { type: 'CapturePayment'; orderId: string; amount: number }
  | { type: 'CheckPaymentStatus'; orderId: string }
  | { type: 'CancelOrder'; orderId: string; reason: string }
  | { type: 'ReleaseStock'; orderId: string }
  | { type: 'MarkOrderPaid'; orderId: string }
  | { type: 'CreateShipment'; orderId: string }
  | { type: 'RefundPayment'; orderId: string; amount: number }
  | { type: 'AlertOperations'; orderId: string; reason: string };

export interface Decision {
  readonly next: Step;
  readonly timeoutMs: number | null;
  readonly commands: readonly OrderCommand[];
}

const go = (next: Step, timeoutMs: number | null, ...commands: OrderCommand[]): Decision => ({ next, timeoutMs, commands });

/** The transition table: (step, message) -> decision, or null when the message means nothing in this step. */
export function decide(saga: Pick<OrderSagaState, 'orderId' | 'step' | 'total' | 'attempts'>, message: OrderMessage): Decision | null {
  // A timeout set for an earlier step arrived late: it means nothing now.
  if (message.type === 'SagaTimedOut' && message.step !== saga.step) return null;
  const id = saga.orderId;
  switch (`${saga.step}/${message.type}`) {
    case 'ReservingStock/StockReserved':
      return go('CapturingPayment', PAYMENT_TIMEOUT_MS, { type: 'CapturePayment', orderId: id, amount: saga.total });
    case 'ReservingStock/OutOfStock':
      return go('Cancelled', null, { type: 'CancelOrder', orderId: id, reason: 'OutOfStock' });
    case 'ReservingStock/SagaTimedOut':
      return go('Cancelled', null, { type: 'ReleaseStock', orderId: id }, { type: 'CancelOrder', orderId: id, reason: 'StockTimeout' });
    // Pivot: an unknown payment outcome is not compensated blindly; ask first.
    case 'CapturingPayment/PaymentCaptured':
    case 'CheckingPayment/PaymentCaptured':
      return go('CreatingShipment', SHIPMENT_TIMEOUT_MS, { type: 'MarkOrderPaid', orderId: id }, { type: 'CreateShipment', orderId: id });
    case 'CapturingPayment/PaymentFailed':
    case 'CheckingPayment/PaymentFailed':
      return go('ReleasingStock', STOCK_TIMEOUT_MS, { type: 'ReleaseStock', orderId: id });
    case 'CapturingPayment/SagaTimedOut':
    case 'CheckingPayment/SagaTimedOut':
      return go('CheckingPayment', PAYMENT_TIMEOUT_MS, { type: 'CheckPaymentStatus', orderId: id });
    // Retryable: no rollback, try again; when attempts run out, tell a human.
    case 'CreatingShipment/ShipmentCreated':
      return go('Completed', null);
    case 'CreatingShipment/SagaTimedOut':
      return saga.attempts < MAX_SHIPMENT_ATTEMPTS
        ? go('CreatingShipment', SHIPMENT_TIMEOUT_MS, { type: 'CreateShipment', orderId: id })
        : go('Failed', null, { type: 'AlertOperations', orderId: id, reason: 'Shipment could not be created' });
    case 'ReleasingStock/StockReleased':
      return go('Cancelled', null, { type: 'CancelOrder', orderId: id, reason: 'PaymentFailed' });
    case 'ReleasingStock/SagaTimedOut':
      return go('ReleasingStock', STOCK_TIMEOUT_MS, { type: 'ReleaseStock', orderId: id });
    // A payment that shows up after cancellation must be refunded.
    case 'Cancelled/PaymentCaptured':
      return go('Refunding', PAYMENT_TIMEOUT_MS, {
        type: 'RefundPayment',
        orderId: id,
        amount: (message as { amount: number }).amount,
      });
    case 'Refunding/PaymentRefunded':
      return go('Cancelled', null);
    case 'Refunding/RefundFailed':
      return go('Failed', null, {
        type: 'AlertOperations',
        orderId: id,
        reason: `Refund failed: ${(message as { reason: string }).reason}`,
      });
    default:
      // Duplicates and out-of-order messages change nothing.
      return null;
  }
}

/** Instrumentation for the demo: lets a scenario hold a step after it has read its state. */
export interface OrderSagaHooks {
  /** Awaited inside the step, after the state was loaded and before the decision is applied. */
  readonly afterLoad?: (message: OrderMessage, saga: OrderSagaState) => Promise<void> | void;
  /** Called with each decision a step applies (or null when it ignores the message). */
  readonly onDecision?: (message: OrderMessage, from: Step, decision: Decision | null) => void;
}

function apply(saga: OrderSagaState, decision: Decision, ctx: StepContext<OrderMessage, OrderCommand>): void {
  saga.attempts = decision.next === saga.step ? saga.attempts + 1 : 1;
  saga.step = decision.next;
  // One named timer per saga: scheduling replaces it, and leaving the step cancels it (step-scoped).
  if (decision.timeoutMs !== null) {
    ctx.schedule('timeout', decision.timeoutMs, { type: 'SagaTimedOut', orderId: saga.orderId, step: decision.next });
  } else {
    ctx.cancel('timeout');
  }
  for (const command of decision.commands) ctx.send(command);
  if (decision.next === 'Completed' || decision.next === 'Failed') ctx.complete();
}

/** Builds the order saga definition; `hooks` are for the demo's race scenario and tracing. */
export function createOrderSaga(hooks: OrderSagaHooks = {}) {
  const step = async (saga: OrderSagaState, message: OrderMessage, ctx: StepContext<OrderMessage, OrderCommand>) => {
    await hooks.afterLoad?.(message, saga);
    const from = saga.step;
    const decision = decide(saga, message);
    hooks.onDecision?.(message, from, decision);
    if (decision) apply(saga, decision, ctx);
  };
  return defineSaga<OrderSagaState, OrderMessage, OrderCommand>({
    name: 'order',
    state: OrderSagaState,
    correlation: { property: 'orderId', from: (message) => message.orderId },
    startedBy: ['OrderPlaced'],
    stepProperty: 'step',
    // Cancelled is not completion: a late PaymentCaptured must still find the saga and refund.
    steps: {
      async OrderPlaced(saga, message, ctx) {
        await hooks.afterLoad?.(message, saga);
        if (!ctx.isNew) {
          hooks.onDecision?.(message, saga.step, null);
          return;
        }
        saga.total = message.total;
        saga.step = 'ReservingStock';
        saga.attempts = 1;
        ctx.schedule('timeout', STOCK_TIMEOUT_MS, { type: 'SagaTimedOut', orderId: saga.orderId, step: 'ReservingStock' });
        ctx.send({ type: 'ReserveStock', orderId: message.orderId, books: message.books });
      },
      StockReserved: step,
      OutOfStock: step,
      PaymentCaptured: step,
      PaymentFailed: step,
      ShipmentCreated: step,
      StockReleased: step,
      PaymentRefunded: step,
      RefundFailed: step,
      SagaTimedOut: step,
    },
  });
}
