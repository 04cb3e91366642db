// A separate MikroORM application that installs mikro-orm-saga from its npm tarball (see test/package.test.ts).
// It only imports the package's public entry points, so it type-checks against the published .d.ts files.
import { Entity, MikroORM, type Options, Property } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { TsMorphMetadataProvider } from '@mikro-orm/reflection';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { defineSaga, SAGA_ENTITIES, SagaRuntime, SagaState, SagaTimer } from 'mikro-orm-saga';
import { SAGA_MIGRATIONS } from 'mikro-orm-saga/migrations';
import { FakeClock } from 'mikro-orm-saga/testing';

@Entity({ tableName: 'subscription_saga' })
export class SubscriptionSaga extends SagaState {
  @Property({ type: 'string', length: 64, fieldName: 'customer_id', unique: true })
  customerId!: string;

  @Property({ type: 'string', length: 20, fieldName: 'status' })
  status: string = 'trial';
}

type SubscriptionMessage =
  | { type: 'TrialStarted'; customerId: string }
  | { type: 'Paid'; customerId: string }
  | { type: 'TrialEnded'; customerId: string };

const subscriptionSaga = defineSaga<SubscriptionSaga, SubscriptionMessage>({
  name: 'subscription',
  state: SubscriptionSaga,
  correlation: { property: 'customerId', from: (m) => m.customerId },
  startedBy: ['TrialStarted'],
  stepProperty: 'status',
  steps: {
    TrialStarted(saga, message, ctx) {
      ctx.schedule('trial-end', { days: 14 }, { type: 'TrialEnded', customerId: message.customerId });
      ctx.send({ type: 'WelcomeEmail', customerId: message.customerId });
      saga.status = 'trial';
    },
    Paid(saga, _message, ctx) {
      saga.status = 'active';
      ctx.complete();
    },
    TrialEnded(saga) {
      saga.status = 'expired';
    },
  },
});

const [dialect = 'sqlite', provider = 'reflect', location = 'app.sqlite'] = process.argv.slice(2);
const common = {
  entities: [...SAGA_ENTITIES, SubscriptionSaga],
  extensions: [Migrator],
  metadataProvider: provider === 'ts-morph' ? TsMorphMetadataProvider : undefined,
  metadataCache: { enabled: false },
};
const options: Options =
  dialect === 'postgresql'
    ? {
        ...common,
        driver: PostgreSqlDriver,
        clientUrl: location,
        migrations: { migrationsList: [...SAGA_MIGRATIONS.postgresql], silent: true, snapshot: false },
      }
    : {
        ...common,
        driver: SqliteDriver,
        dbName: location,
        migrations: { migrationsList: [...SAGA_MIGRATIONS.sqlite], silent: true, snapshot: false },
      };

const orm = await MikroORM.init(options);
try {
  await orm.getMigrator().up();
  await orm.getSchemaGenerator().updateSchema();
  const runtime = new SagaRuntime({ em: orm.em, sagas: [subscriptionSaga], clock: new FakeClock() });
  const started = await runtime.handle(subscriptionSaga, { type: 'TrialStarted', customerId: 'c-1' });
  const paid = await runtime.handle(subscriptionSaga, { type: 'Paid', customerId: 'c-1' });
  const timers = await orm.em.fork().count(SagaTimer, {});
  const libraryDiff = (await orm.getSchemaGenerator().getUpdateSchemaSQL({ wrap: false })).trim();
  console.log(JSON.stringify({ started, paid, timers, libraryDiff }));
} finally {
  await orm.close(true);
}
