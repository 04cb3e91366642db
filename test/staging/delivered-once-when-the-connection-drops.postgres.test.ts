// A staged delivery whose unit of work loses its connection is not the row's fault, on PostgreSQL: when COMMIT went
// through but its answer was lost, the row is stamped delivered with the saga's change and never delivered again; when
// the connection dropped before COMMIT or at BEGIN, nothing was written and the next pass delivers it. Either way no
// attempt is charged and the step's effects land once.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { rowsOf } from '../support/rows.js';
import { stagedRowsOf } from '../support/staged-rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { CommitDroppingProxy, type CommitFault } from '../support/tcp-proxy.js';

describe('a staged delivery when the connection drops (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const proxies: CommitDroppingProxy[] = [];
  afterEach(async () => {
    for (const proxy of proxies.splice(0)) await proxy.close();
  });

  /** An ORM instance whose connections go through a proxy that can drop them. */
  async function throughProxy(): Promise<{ proxy: CommitDroppingProxy; orm: MikroORM }> {
    const target = new URL(db().config.clientUrl as string);
    const proxy = new CommitDroppingProxy(target.hostname, Number(target.port || 5432));
    proxies.push(proxy);
    target.host = `127.0.0.1:${await proxy.listen()}`;
    const orm = await db().openAnother({ clientUrl: target.toString(), pool: { min: 0, max: 4 } });
    return { proxy, orm };
  }
  const clock = () => new FakeClock('2026-01-05T09:00:00.000Z');

  const cases: [CommitFault, string][] = [
    ['drop-after-commit', 'committed, its answer lost: stamped delivered with the change, not delivered again'],
    ['drop-before-commit', 'dropped before COMMIT: nothing written, delivered by the next pass'],
    ['drop-at-begin', 'dropped at BEGIN: nothing written, delivered by the next pass'],
  ];
  for (const [fault, behaviour] of cases) {
    it(`${behaviour}; uncharged, one step in effect`, async () => {
      const { proxy, orm } = await throughProxy();
      let runs = 0;
      // The step runs before its unit of work begins its transaction: the next BEGIN and COMMIT on the wire are that one's.
      const arming = scriptedVariant('Counted', (saga, _message, ctx) => {
        if (runs++ === 0) proxy.arm(fault);
        saga.counter++;
        ctx.send({ type: 'Counted' });
      });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [arming], clock: clock() });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, backoff: { jitter: false } });
      const key = uniqueKey(fault);
      await orm.em.fork().transactional(async (em) => {
        runtime.stageDelivery(em, arming, { type: 'Counted', key }, { messageId: `${key}-m` });
      });
      const first = await dispatcher.runOnce();
      await proxy.faulted;
      expect(first.inbox).toMatchObject({ claimed: 1, delivered: 0, failed: 0, interrupted: 1 });
      await drainDueTimers(dispatcher);
      const saga = await rowsOf(db().orm).saga(key);
      expect(saga).toMatchObject({ counter: 1, version: 0 });
      expect(await rowsOf(db().orm).outbox(saga!.id)).toHaveLength(1);
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([{ outcome: 'delivered', attempts: 0, lastError: null }]);
    });
  }
});
