// docs/operations.md's example is code that runs: the marked region below, on both databases, through an
// operator's morning (a saga whose stock timeout died, requeued, fired, then purged a month later).
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defineSaga, type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { DIALECTS } from '../support/databases.js';
import { useDatabase } from '../support/suite.js';
import { OrderSaga, orderSaga } from './fixtures/order-saga.js';

const lines = (code: string) =>
  code
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');

/** The order saga while its payment-side dependency is down: the stock timeout's step fails. */
const orderSagaWhileDown = defineSaga<OrderSaga, { type: 'OrderPlaced' | 'StockTimedOut'; orderId: string }>({
  name: 'order',
  state: OrderSaga,
  correlation: { property: 'orderId', from: (m) => m.orderId },
  startedBy: ['OrderPlaced'],
  steps: {
    OrderPlaced() {},
    StockTimedOut() {
      throw new Error('inventory service down');
    },
  },
});

describe('docs/operations.md', () => {
  it("'The operator API' example is this file's marked region, with its import", async () => {
    const text = await readFile(resolve(import.meta.dirname, '..', '..', 'docs/operations.md'), 'utf8');
    const block = lines(text.slice(text.indexOf('## The operator API')).match(/```ts\n([\s\S]*?)```/)![1]!);
    const source = lines(await readFile(resolve(import.meta.dirname, 'operations-example.test.ts'), 'utf8'));
    const region = source.slice(source.indexOf('// docs/operations.md begin') + 1, source.indexOf('// docs/operations.md end'));
    expect(region).toEqual(block.filter((line) => !line.startsWith('import ')));
    expect(block[0]).toBe("import { SagaOperations } from 'mikro-orm-saga/operations';");
  });
});

for (const dialect of DIALECTS) {
  describe(`the docs/operations.md example (${dialect})`, () => {
    const db = useDatabase(dialect, [OrderSaga]);

    it('finds the stuck saga, requeues its dead timer, which fires, and purges it a month later', async () => {
      const orm = db().orm;
      const clock = new FakeClock('2026-01-05T09:00:00Z');
      const runtime = new SagaRuntime({ em: orm.em, sagas: [orderSaga], clock });
      const sent: OutboxEnvelope[] = [];
      const publish = async (envelope: OutboxEnvelope) => void sent.push(envelope);
      const options = { logger: silentLogger, maxAttempts: 2, backoff: { baseMs: 1_000, maxMs: 1_000, jitter: false }, publish };
      await runtime.handle(orderSaga, { type: 'OrderPlaced', orderId: 'o-1' });
      // The stock timeout comes due while its step fails: two attempts, then it is dead-lettered.
      const whileDown = new SagaDispatcher({ runtime: new SagaRuntime({ em: orm.em, sagas: [orderSagaWhileDown], clock }), ...options });
      for (const step of [60_000, 1_000]) {
        clock.advance(step);
        await whileDown.runOnce();
      }
      clock.advance({ days: 1 });
      const dayAgo = new Date(clock.now().getTime() - 86_400_000 + 1);

      // docs/operations.md begin
      const ops = new SagaOperations({ runtime }); // or { em: orm.em, sagas: [orderSaga], clock }
      const stuck = await ops.listSagas({ sagaType: 'order', status: 'active', createdBefore: dayAgo, limit: 20 });
      const detail = await ops.getSaga({ sagaType: 'order', sagaId: stuck.items[0]!.id });
      const dead = await ops.listTimers({ status: 'dead_lettered', sagaId: detail!.id, limit: 20 });
      const requeued = await ops.requeueTimers(dead.items.map((timer) => timer.id));
      // docs/operations.md end

      expect(stuck.items.map((s) => s.correlation)).toEqual(['o-1']);
      expect(dead.items).toMatchObject([
        { name: 'stock-timeout', attempts: 2, lastError: expect.stringContaining('inventory service down') },
      ]);
      expect(requeued).toMatchObject({ requested: 1, affected: 1 });
      await new SagaDispatcher({ runtime, ...options }).runOnce();
      expect(await orm.em.fork().findOne(OrderSaga, { orderId: 'o-1' })).toMatchObject({ step: 'Cancelled', completedAt: clock.now() });
      expect(sent.map((e) => e.type)).toEqual(['ReserveStock']);

      clock.advance({ days: 31 });
      const monthAgo = new Date(clock.now().getTime() - 30 * 86_400_000);
      const purged = await ops.purge({ dispatchedBefore: monthAgo, completedSagasBefore: monthAgo, expiredMessageIds: true });
      expect(purged).toMatchObject({ sagas: { order: 1 } });
      expect(await orm.em.fork().count(OrderSaga, {})).toBe(0);
    });
  });
}
