/**
 * Figures "staging in the app's transaction" (PostgreSQL): an application transaction that writes a row of its own
 * (an article) and, in the same transaction, hands work to a background system; `CALLERS` callers at once, each
 * through its own fork of the app's MikroORM EntityManager (`em.transactional`), as an app using MikroORM would:
 * - ours stages a saga delivery (`runtime.stageDelivery`);
 * - graphile-worker adds a job with its SQL function in the same transaction (`select graphile_worker.add_job(...)`,
 *   how its docs say to enqueue inside a transaction);
 * - pg-boss sends with its `db` option on the transaction's own connection (`boss.send(name, data, { db })`).
 * A MikroORM transaction writing the article alone is printed as the limit (no target): what handing work over adds.
 * Then "staged delivery latency": the app stages at a steady rate while a dispatcher at its defaults runs in the same
 * process (as in an app serving requests); staging call to the start of the step, median and 99th percentile.
 */
import { type EntityManager, EntitySchema, type MikroORM } from '@mikro-orm/core';
import type { Knex, SqlEntityManager } from '@mikro-orm/knex';
import { runMigrations } from 'graphile-worker';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { defineSaga, SagaDispatcher, SagaInbox, SagaRuntime, SagaState, SagaStateSchema, silentLogger } from '../src/index.js';
import { createBenchDatabase } from './bench-database.js';
import type { StepOutput } from './both-majors.js';
import { compare, interleave, secondsOf } from './figure-stats.js';

/** Callers at once, each on its own connection. */
const CALLERS = 4;
/** Ours against each of the others: at least as fast. */
const TARGET = 1;

/** The application's own row. */
class BenchArticle {
  id!: string;
  title!: string;
}
const BenchArticleSchema = new EntitySchema<BenchArticle>({
  class: BenchArticle,
  tableName: 'bench_article',
  properties: { id: { type: 'uuid', primary: true }, title: { type: 'string', length: 200 } },
});

/** The article's review saga; its step notes when it ran (the latency figure). */
class BenchReview extends SagaState {
  articleId!: string;
}
const BenchReviewSchema = new EntitySchema<BenchReview, SagaState>({
  class: BenchReview,
  extends: SagaStateSchema,
  tableName: 'bench_review',
  properties: { articleId: { type: 'uuid', fieldName: 'article_id', unique: true } },
});
type Submitted = { type: 'ArticleSubmitted'; articleId: string; stagedAt: number };
const stepStarts: number[] = [];
const reviewSaga = defineSaga<BenchReview, Submitted>({
  name: 'bench-review',
  state: BenchReview,
  correlation: { property: 'articleId', from: { ArticleSubmitted: (m) => m.articleId } },
  startedBy: ['ArticleSubmitted'],
  steps: {
    ArticleSubmitted(_saga, message) {
      stepStarts.push(Date.now() - message.stagedAt);
    },
  },
});

/** An app transaction: the article, and whatever `handOver` adds to the same transaction. */
type AppTransaction = (em: EntityManager, article: BenchArticle) => Promise<void> | void;

/** Runs `count` app transactions, `CALLERS` at once; transactions per second. */
async function appTransactions(orm: MikroORM, count: number, handOver: AppTransaction): Promise<number> {
  let next = 0;
  const caller = async () => {
    while (next < count) {
      next += 1;
      await orm.em.fork().transactional(async (em) => {
        const article = em.create(BenchArticle, { id: crypto.randomUUID(), title: 'A title' });
        await handOver(em, article);
      });
    }
  };
  const seconds = await secondsOf(() => Promise.all(Array.from({ length: CALLERS }, caller)));
  return count / seconds;
}

/** The pg client MikroORM 6's (knex's) transaction runs on: a knex transaction hands out its own connection. */
async function transactionClient(em: EntityManager): Promise<pg.ClientBase> {
  const trx = em.getTransactionContext<Knex.Transaction>()!;
  return (await trx.client.acquireConnection()) as pg.ClientBase;
}

export async function appTransactionStagingFigures(
  reps: number,
  transactions: number,
  latencyRate: number,
  latencySeconds: number,
  log: (line: string) => void = () => {},
): Promise<StepOutput> {
  const created = await createBenchDatabase('postgresql', { entities: [BenchArticleSchema, BenchReviewSchema] });
  const { orm, location: url } = created;
  const jobs = new pg.Pool({ connectionString: url, max: 1 });
  const boss = new PgBoss({ connectionString: url, max: 2 });
  boss.on('error', () => undefined);
  try {
    await runMigrations({ pgPool: jobs });
    await boss.start();
    await boss.createQueue('review');
    const runtime = new SagaRuntime({ em: orm.em, sagas: [reviewSaga] });
    const message = (article: BenchArticle): Submitted => ({ type: 'ArticleSubmitted', articleId: article.id, stagedAt: Date.now() });
    const samples = await interleave(
      reps,
      {
        ours: () => appTransactions(orm, transactions, (em, article) => void runtime.stageDelivery(em, reviewSaga, message(article))),
        graphile: () =>
          appTransactions(orm, transactions, async (em, article) => {
            await em.flush();
            await (em as SqlEntityManager).execute('select graphile_worker.add_job(?, ?::json)', [
              'review',
              JSON.stringify(message(article)),
            ]);
          }),
        pgBoss: () =>
          appTransactions(orm, transactions, async (em, article) => {
            await em.flush();
            const client = await transactionClient(em);
            await boss.send('review', message(article), { db: { executeSql: (text, values) => client.query(text, values) } });
          }),
        articleAlone: () => appTransactions(orm, transactions, () => undefined),
      },
      { warmUp: true },
    );
    const name = (what: string) => `app transaction: an article and ${what}, ${CALLERS} callers (PostgreSQL)`;
    const limit = { name: 'the article alone, no work handed over', samples: samples.articleAlone };
    const figures = [
      compare(
        name('a staged saga delivery'),
        'transactions/s',
        samples.ours,
        { name: "graphile-worker's add_job in the same transaction", samples: samples.graphile },
        TARGET,
        { limit },
      ),
      compare(
        name('a staged saga delivery'),
        'transactions/s',
        samples.ours,
        { name: "pg-boss's send on the transaction's connection", samples: samples.pgBoss },
        TARGET,
        { limit },
      ),
    ];
    const latency = await stagedLatency(orm, runtime, latencyRate, latencySeconds);
    log(`  staged delivery latency: median ${latency.medianMs} ms, p99 ${latency.p99Ms} ms at ${latencyRate} deliveries/s`);
    return {
      figures,
      details: { latency },
      report: `staged delivery latency at ${latencyRate} deliveries/s for ${latencySeconds} s, one dispatcher at its defaults in the app's process: staging call to step, median ${latency.medianMs} ms, p99 ${latency.p99Ms} ms`,
    };
  } finally {
    await boss.stop({ graceful: false, wait: true }).catch(() => undefined);
    await jobs.end();
    await created.dispose();
  }
}

/** Stages `rate` deliveries a second for `seconds` while a dispatcher at its defaults delivers them. */
async function stagedLatency(orm: MikroORM, runtime: SagaRuntime, rate: number, seconds: number) {
  // The throughput figures staged deliveries no dispatcher ran: not this figure's.
  await orm.em.fork().nativeDelete(SagaInbox, {});
  stepStarts.length = 0;
  const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, publish: async () => undefined });
  const total = Math.round(rate * seconds);
  dispatcher.start();
  await new Promise<void>((resolve) => {
    const off = dispatcher.on('idle', () => {
      off();
      resolve();
    });
  });
  const started = performance.now();
  let staged = 0;
  while (staged < total) {
    const owed = Math.min(total, Math.floor(((performance.now() - started) / 1000) * rate)) - staged;
    for (let i = 0; i < owed; i++) {
      await orm.em.fork().transactional(async (em) => {
        const article = em.create(BenchArticle, { id: crypto.randomUUID(), title: 'A title' });
        runtime.stageDelivery(em, reviewSaga, { type: 'ArticleSubmitted', articleId: article.id, stagedAt: Date.now() });
      });
    }
    staged += Math.max(0, owed);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  while (stepStarts.length < total) await new Promise((resolve) => setTimeout(resolve, 5));
  await dispatcher.stop();
  const sorted = [...stepStarts].sort((a, b) => a - b);
  return { medianMs: sorted[Math.floor(sorted.length / 2)]!, p99Ms: sorted[Math.floor(sorted.length * 0.99)]!, deliveries: total };
}
