import { defineSaga } from 'mikro-orm-saga';
import { OrderSaga } from './order-saga.entity.js';

/** How long an order waits for its payment, ms. Default 15 minutes; `PAYMENT_TIMEOUT_MS` overrides it. */
export const PAYMENT_TIMEOUT_MS = Number(process.env.PAYMENT_TIMEOUT_MS ?? 15 * 60_000);

export type OrderMessage =
  | { type: 'OrderPlaced'; orderId: string; customerId: string }
  | { type: 'PaymentReceived'; orderId: string }
  | { type: 'PaymentTimedOut'; orderId: string };

/** What the saga sends through the outbox: `ctx.send` takes only these. */
export type OrderCommand =
  | { type: 'ConfirmOrder'; orderId: string }
  | { type: 'ShipOrder'; orderId: string }
  | { type: 'OrderCancelled'; orderId: string };

/** An order waits for its payment; without one in time it is cancelled. */
export const orderSaga = defineSaga<OrderSaga, OrderMessage, OrderCommand>({
  name: 'order',
  state: OrderSaga,
  correlation: { property: 'orderId', from: (m) => m.orderId },
  startedBy: ['OrderPlaced'],
  stepProperty: 'step',
  steps: {
    OrderPlaced(saga, m, ctx) {
      saga.customerId = m.customerId;
      ctx.schedule('payment-timeout', PAYMENT_TIMEOUT_MS, { type: 'PaymentTimedOut', orderId: m.orderId });
      ctx.send({ type: 'ConfirmOrder', orderId: m.orderId });
    },
    PaymentReceived(saga, m, ctx) {
      saga.step = 'Paid'; // leaves AwaitingPayment: 'payment-timeout' is cancelled
      ctx.send({ type: 'ShipOrder', orderId: m.orderId });
      ctx.complete();
    },
    PaymentTimedOut(saga, m, ctx) {
      saga.step = 'Cancelled';
      ctx.send({ type: 'OrderCancelled', orderId: m.orderId });
      ctx.complete();
    },
  },
});
