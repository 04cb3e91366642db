// A separate MikroORM 7 application that installs mikro-orm-saga from its npm tarball (see
// test/package-v7.test.ts). It only imports the package's public entry points, so it type-checks against the
// published .d.ts files, here with MikroORM 7's types.
import { MikroORM } from '@mikro-orm/core';
import { TsMorphMetadataProvider } from '@mikro-orm/reflection';
import { defineSaga, SagaRuntime, SagaTimer } from 'mikro-orm-saga';
import { SAGA_MIGRATIONS } from 'mikro-orm-saga/migrations';
import { FakeClock } from 'mikro-orm-saga/testing';
import { InvoiceSaga, SubscriptionSaga } from './entities.js';
import { appConfig } from './mikro-orm.config.js';

type SubscriptionMessage =
  | { type: 'TrialStarted'; customerId: string }
  | { type: 'Paid'; customerId: string }
  | { type: 'TrialEnded'; customerId: string };
type InvoiceMessage =
  | { type: 'InvoiceIssued'; invoiceId: string }
  | { type: 'InvoicePaid'; invoiceId: string }
  | { type: 'InvoiceReminder'; invoiceId: string };

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

const invoiceSaga = defineSaga<InvoiceSaga, InvoiceMessage>({
  name: 'invoice',
  state: InvoiceSaga,
  correlation: { property: 'invoiceId', from: (m) => m.invoiceId },
  startedBy: ['InvoiceIssued'],
  stepProperty: 'status',
  steps: {
    InvoiceIssued(saga, message, ctx) {
      ctx.schedule('reminder', { days: 7 }, { type: 'InvoiceReminder', invoiceId: message.invoiceId });
      ctx.send({ type: 'InvoiceEmail', invoiceId: message.invoiceId });
      saga.status = 'open';
    },
    InvoicePaid(saga, _message, ctx) {
      saga.status = 'paid';
      ctx.complete();
    },
    InvoiceReminder(saga) {
      saga.status = 'reminded';
    },
  },
});

// argv: dialect, metadata provider (`default`: MikroORM 7's own, or `ts-morph`), database location, and where
// migrations come from: `list` (the library's `migrationsList` alone) or `folder` (the app's own folder, which
// holds its migration and one re-export file per library migration; see docs/migrations.md).
const [dialectArg = 'sqlite', provider = 'default', location = 'app.sqlite', source = 'list'] = process.argv.slice(2);
const dialect = dialectArg === 'postgresql' ? 'postgresql' : 'sqlite';
const discoveryLog: string[] = [];
const orm = await MikroORM.init(
  appConfig(
    dialect,
    location,
    source === 'folder'
      ? { path: `dist/migrations-${dialect}`, glob: '!(*.d).js', silent: true, snapshot: false }
      : { migrationsList: [...SAGA_MIGRATIONS[dialect]], silent: true, snapshot: false },
    {
      ...(provider === 'ts-morph' ? { metadataProvider: TsMorphMetadataProvider } : {}),
      // The metadata cache keeps MikroORM's default: on with ts-morph (in ./temp), off otherwise.
      debug: ['discovery'],
      logger: (message: string) => void discoveryLog.push(message),
    },
  ),
);

const indexSql = async (table: string) => {
  const query =
    dialect === 'postgresql'
      ? `select indexdef as sql from pg_indexes where indexname = '${table}_completed_at_index'`
      : `select sql from sqlite_master where name = '${table}_completed_at_index'`;
  const [row] = await orm.em.fork().getConnection().execute<{ sql: string }[]>(query);
  return row?.sql;
};

try {
  await orm.migrator.up();
  // The app's own table (`app_note`, folder mode) is no entity: keep it.
  const dropTables = source !== 'folder';
  await orm.schema.update({ dropTables });
  const runtime = new SagaRuntime({ em: orm.em, sagas: [subscriptionSaga, invoiceSaga], clock: new FakeClock() });
  const subscription = {
    started: await runtime.handle(subscriptionSaga, { type: 'TrialStarted', customerId: 'c-1' }),
    paid: await runtime.handle(subscriptionSaga, { type: 'Paid', customerId: 'c-1' }),
  };
  const invoice = {
    started: await runtime.handle(invoiceSaga, { type: 'InvoiceIssued', invoiceId: 'i-1' }),
    paid: await runtime.handle(invoiceSaga, { type: 'InvoicePaid', invoiceId: 'i-1' }),
  };
  const em = orm.em.fork();
  const executed = (await orm.migrator.getExecuted()).map((migration) => migration.name);
  const appNotes =
    source === 'folder' ? Number((await em.getConnection().execute<{ n: number }[]>('select count(*) as n from "app_note"'))[0]?.n) : null;
  console.log(
    JSON.stringify({
      subscription,
      invoice,
      timers: await em.count(SagaTimer, {}),
      libraryDiff: (await orm.schema.getUpdateSchemaSQL({ wrap: false, dropTables })).trim(),
      executed,
      missingLibraryMigrations: SAGA_MIGRATIONS[dialect].map((m) => m.name).filter((name) => !executed.includes(name)),
      activeIndexes: [await indexSql('subscription_saga'), await indexSql('invoice_saga')],
      cachedEntities: discoveryLog.filter((line) => line.includes('using cached metadata')).length,
      appNotes,
    }),
  );
} finally {
  await orm.close(true);
}
