// A MikroORM 7 application's saga state entities, in the two styles 7 offers beside legacy decorators: TC39 (ES)
// decorators, compiled by tsc with no `experimentalDecorators`, and `defineEntity` with a class of the app's own.
// Neither needs reflect-metadata, and the app installs no decorators package for the library's own entities.
import { defineEntity } from '@mikro-orm/core';
import { Entity, Property } from '@mikro-orm/decorators/es';
import { SagaState } from 'mikro-orm-saga';

@Entity({ tableName: 'subscription_saga' })
export class SubscriptionSaga extends SagaState {
  @Property({ type: 'string', length: 64, fieldName: 'customer_id', unique: true })
  customerId!: string;

  @Property({ type: 'string', length: 20, fieldName: 'status' })
  status: string = 'trial';
}

export class InvoiceSaga extends SagaState {
  invoiceId!: string;
  status: string = 'open';
}

export const InvoiceSagaSchema = defineEntity({
  class: InvoiceSaga,
  extends: SagaState,
  tableName: 'invoice_saga',
  properties: (p) => ({
    invoiceId: p.string().length(64).fieldName('invoice_id').unique(),
    status: p.string().length(20).fieldName('status'),
  }),
});

/** The app's entities, to register beside the library's `SAGA_ENTITIES`. */
export const APP_ENTITIES = [SubscriptionSaga, InvoiceSagaSchema];
