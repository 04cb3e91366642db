import { Entity, Property } from '@mikro-orm/core';
import { SagaState } from 'mikro-orm-saga';

/** The order saga's state: a table of the app's own (`order_saga`), found by the same folder-based discovery. */
@Entity({ tableName: 'order_saga' })
export class OrderSaga extends SagaState {
  /** Correlation property: one saga per order. */
  @Property({ type: 'string', length: 64, unique: true })
  orderId!: string;

  @Property({ type: 'string', length: 64 })
  customerId!: string;

  @Property({ type: 'string', length: 32 })
  step: string = 'AwaitingPayment';
}
