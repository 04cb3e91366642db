// The app's saga, in TypeScript run as it is (tsx): its state entity maps the table the test database has
// (test/fixtures/scripted-saga.ts's `scripted_saga`), so the CLI reads the rows test/support/operator-day.ts seeds.
import { defineEntity } from '@mikro-orm/core';
import { defineSaga, SagaState, SagaStateSchema } from 'mikro-orm-saga';

export class OrderSaga extends SagaState {
  key!: string;
  stage: string = 'open';
  counter: number = 0;
  log: string = '';
}

export const OrderSagaSchema = defineEntity({
  class: OrderSaga,
  extends: SagaStateSchema,
  tableName: 'scripted_saga',
  properties: {
    key: { type: 'string', length: 100, fieldName: 'key', unique: true },
    stage: { type: 'string', length: 100, fieldName: 'stage' },
    counter: { type: 'integer', fieldName: 'counter' },
    log: { type: 'text', fieldName: 'log' },
  },
});

type OrderMessage = { readonly type: 'Start' | 'Tick'; readonly key: string };

export const orderSaga = defineSaga<OrderSaga, OrderMessage>({
  name: 'scripted',
  state: OrderSaga,
  correlation: { property: 'key', from: (message) => message.key },
  startedBy: ['Start'],
  stepProperty: 'stage',
  steps: {
    Start() {},
    Tick() {},
  },
});
