// The README's "Define a saga" example, verbatim but for the import path (test/docs-examples.test.ts keeps them equal).
import { defineEntity } from '@mikro-orm/core';
import { defineSaga, SagaState, SagaStateSchema } from '../../src/index.js';

export class OrderSaga extends SagaState {
  // id, created/updated/completed_at and version come with it
  orderId!: string; // correlation property: must be unique
  step: string = 'ReservingStock';
}

// MikroORM 6.6 and 7 alike; decorators work too (docs/sagas.md)
export const OrderSagaSchema = defineEntity({
  class: OrderSaga,
  extends: SagaStateSchema,
  properties: (p) => ({ orderId: p.string().unique(), step: p.string() }),
});

// the messages the saga handles, and the ones it sends (optional; the default is any message)
type OrderMessage =
  | { type: 'OrderPlaced'; orderId: string }
  | { type: 'StockReserved'; orderId: string }
  | { type: 'StockTimedOut'; orderId: string };
type OrderCommand = { type: 'ReserveStock'; orderId: string };

export const orderSaga = defineSaga<OrderSaga, OrderMessage, OrderCommand>({
  name: 'order',
  state: OrderSaga,
  correlation: { property: 'orderId', from: (m) => m.orderId },
  startedBy: ['OrderPlaced'],
  stepProperty: 'step', // a timer belongs to the step the saga is in once its scheduling step has run
  steps: {
    OrderPlaced(_saga, m, ctx) {
      // the saga stays in ReservingStock: 'stock-timeout' belongs to it
      ctx.schedule('stock-timeout', { minutes: 1 }, { type: 'StockTimedOut', orderId: m.orderId });
      ctx.send({ type: 'ReserveStock', orderId: m.orderId }); // outbox row, same transaction
    },
    StockReserved(saga) {
      saga.step = 'CapturingPayment'; // leaves ReservingStock: 'stock-timeout' is cancelled
    },
    StockTimedOut(saga, _m, ctx) {
      saga.step = 'Cancelled';
      ctx.complete();
    },
  },
});
