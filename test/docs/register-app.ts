// The README's "Add it to your MikroORM app" example, verbatim but for import paths, below the marker
// (test/docs-examples.test.ts keeps them equal). Type-checked by `npm run lint`, never run: the app's own
// config, entities and broker are only declared. test/package-app/app.ts runs the same calls for real.
import type { EntityClass, Options } from '@mikro-orm/core';
import type { OutboxEnvelope } from '../../src/index.js';

declare const yourConfig: Options;
declare const yourEntities: EntityClass<object>[];
declare const broker: { publish(envelope: OutboxEnvelope): Promise<void> };

// README begin
import { MikroORM } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { SAGA_ENTITIES, SagaDispatcher, SagaRuntime } from '../../src/index.js';
import { OrderSagaSchema, orderSaga } from './order-saga.js'; // your saga, above

const orm = await MikroORM.init({
  ...yourConfig,
  entities: [...yourEntities, ...SAGA_ENTITIES, OrderSagaSchema],
  extensions: [Migrator],
});
// `npx mikro-orm migration:create` now writes saga_timer, saga_outbox, saga_handled_message and order_saga.
await orm.migrator.up(); // MikroORM 6.6 and 7

export const sagas = new SagaRuntime({ em: orm.em, sagas: [orderSaga] });
const dispatcher = new SagaDispatcher({ runtime: sagas, publish: (envelope) => broker.publish(envelope) });
dispatcher.start(); // fires due timers, relays the outbox; await dispatcher.stop() on shutdown

await sagas.handle(orderSaga, { type: 'OrderPlaced', orderId: 'o-1' });
// -> { outcome: 'started', sagaId, version: 0, timersScheduled: 1, messagesSent: 1, ... }
