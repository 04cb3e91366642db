// A separate MikroORM application that installs mikro-orm-saga from its npm tarball (see test/package.test.ts).
// It only imports the package's public entry points, so it type-checks against the published .d.ts files.
// A MikroORM 6 app with 6's decorators (test/package-app-v7 is the MikroORM 7 app).
import { BetterSqliteDriver } from '@mikro-orm/better-sqlite';
import { Entity, MikroORM, type Options, Property } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { TsMorphMetadataProvider } from '@mikro-orm/reflection';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { defineSaga, SAGA_ENTITIES, SagaRuntime, SagaState, SagaTimer } from 'mikro-orm-saga';
import { SAGA_MIGRATIONS } from 'mikro-orm-saga/migrations';
import { inspectSagaSchema, SagaOperations } from 'mikro-orm-saga/operations';
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

// argv: dialect (`postgresql`, `sqlite`, or `better-sqlite`: SQLite through @mikro-orm/better-sqlite), metadata
// provider, database location, and where migrations come from: `list` (the library's `migrationsList` alone) or
// `folder` (the app's own folder, which holds its migration and one re-export file per library migration; see
// docs/migrations.md).
const [dialect = 'sqlite', provider = 'reflect', location = 'app.sqlite', source = 'list'] = process.argv.slice(2);
const sagaDialect = dialect === 'postgresql' ? 'postgresql' : 'sqlite';
const discoveryLog: string[] = [];
const common = {
  entities: [...SAGA_ENTITIES, SubscriptionSaga],
  extensions: [Migrator],
  metadataProvider: provider === 'ts-morph' ? TsMorphMetadataProvider : undefined,
  // The metadata cache keeps MikroORM's default: on with ts-morph (in ./temp), off otherwise.
  debug: ['discovery' as const],
  logger: (message: string) => void discoveryLog.push(message),
  migrations:
    source === 'folder'
      ? { path: `dist/migrations-${sagaDialect}`, glob: '!(*.d).js', silent: true, snapshot: false }
      : { migrationsList: [...SAGA_MIGRATIONS[sagaDialect]], silent: true, snapshot: false },
};
const options: Options =
  dialect === 'postgresql'
    ? { ...common, driver: PostgreSqlDriver, clientUrl: location }
    : { ...common, driver: dialect === 'better-sqlite' ? BetterSqliteDriver : SqliteDriver, dbName: location };

const orm = await MikroORM.init(options);
try {
  await orm.migrator.up();
  // The app's own table (`app_note`, folder mode) is no entity: keep it.
  const dropTables = source !== 'folder';
  await orm.schema.updateSchema({ dropTables });
  const runtime = new SagaRuntime({ em: orm.em, sagas: [subscriptionSaga], clock: new FakeClock() });
  const started = await runtime.handle(subscriptionSaga, { type: 'TrialStarted', customerId: 'c-1' });
  const paid = await runtime.handle(subscriptionSaga, { type: 'Paid', customerId: 'c-1' });
  const operations = new SagaOperations({ runtime });
  const listed = (await operations.listSagas({ sagaType: 'subscription', limit: 5 })).items.map((saga) => ({
    correlation: saga.correlation,
    completed: saga.completedAt !== null,
  }));
  const schemaProblems = await inspectSagaSchema({ em: orm.em, sagas: [subscriptionSaga] });
  const em = orm.em.fork();
  const timers = await em.count(SagaTimer, {});
  const libraryDiff = (await orm.schema.getUpdateSchemaSQL({ wrap: false, dropTables })).trim();
  const executed = (await orm.migrator.getExecutedMigrations()).map((migration) => migration.name);
  const missingLibraryMigrations = SAGA_MIGRATIONS[sagaDialect].map((m) => m.name).filter((name) => !executed.includes(name));
  const indexQuery =
    dialect === 'postgresql'
      ? `select indexdef as sql from pg_indexes where indexname = 'subscription_saga_completed_at_index'`
      : `select sql from sqlite_master where name = 'subscription_saga_completed_at_index'`;
  const [activeIndex] = await em.getConnection().execute<{ sql: string }[]>(indexQuery);
  const appNotes =
    source === 'folder' ? Number((await em.getConnection().execute<{ n: number }[]>('select count(*) as n from "app_note"'))[0]?.n) : null;
  const cachedEntities = discoveryLog.filter((line) => line.includes('using cached metadata')).length;
  console.log(
    JSON.stringify({
      started,
      paid,
      timers,
      libraryDiff,
      executed,
      missingLibraryMigrations,
      activeIndex: activeIndex?.sql,
      cachedEntities,
      appNotes,
      listed,
      schemaProblems,
      platform: orm.em.getPlatform().constructor.name,
    }),
  );
} finally {
  await orm.close(true);
}
