// Break4 (hostile review of 7f1a642): a published row is let go by the lease keeper when its publisher returns,
// before its stamp is written. While that stamp waits (here: held up by a trigger waiting for an advisory lock another
// transaction holds), the row is neither held nor pending: nothing renews its lease and the claim guard does not exclude
// it. Once its lease and delivery timeout have passed (a FakeClock advance), the same dispatcher claims it again
// and publishes it a second time, without a crash and without a lost lease of its own making.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { drainContinuations } from '../support/flush-hold.js';
import { lockWaiters, stampGate, untilLockWaiters } from '../support/row-locks.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

describe('outbox relay: a row whose stamp waits stays held (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const cleanup: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0)) await step().catch(() => undefined);
  });

  async function seed(clock: FakeClock, count: number) {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const rows: { id: string; sagaType: string; sagaId: string }[] = [];
    for (let n = 0; n < count; n++) {
      const key = uniqueKey(`stamp-lease-${n}`);
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [{ op: 'send', message: { type: 'Hello', n } }],
      });
      for (const row of await rowsOf(db().orm).outbox(sagaId!)) rows.push({ id: row.id, sagaType: row.sagaType, sagaId: row.sagaId });
      clock.advance({ seconds: 1 });
    }
    // The order the stamp statement locks its rows in (saga type, saga id, id; collate "C").
    const c = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
    return rows.sort((a, b) => c(a.sagaType, b.sagaType) || c(a.sagaId, b.sagaId) || c(a.id, b.id)).map((row) => row.id);
  }

  /**
   * Holds up the published stamps while "locked": another connection's transaction holds the advisory lock a trigger
   * on the stamp waits for (a stamp no longer waits for a row lock: test/dispatcher-locked-row). `lock` closes the
   * gate (for every stamp, whatever row it names), `release` opens it.
   */
  async function locker() {
    const orm: MikroORM = await db().openAnother();
    const gate = await stampGate(orm);
    const releaseAndClose = async () => {
      await gate.open();
      await orm.close();
    };
    cleanup.push(releaseAndClose);
    return { lock: (_id: string) => gate.close(), release: releaseAndClose };
  }

  it('does not claim and publish again a row whose stamp is still being written, after its lease time passed', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const [first, second] = await seed(clock, 2);
    // Published by the loop's next pass, slowly: that pass is overtaken and the loop claims again meanwhile.
    const [third] = await seed(clock, 1);
    const { lock, release } = await locker();
    const published: string[] = [];
    const slow = deferred<void>();
    const lockHeld = deferred<void>();
    let locked = false;
    const dispatcher = new SagaDispatcher({
      runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }),
      clock,
      logger: silentLogger,
      batchSize: 2,
      concurrency: 2,
      leaseMs: 30_000,
      deliveryTimeoutMs: 10_000,
      pollIntervalMs: 1_000,
      publish: async (envelope) => {
        published.push(envelope.id);
        if (envelope.id === third) await slow.promise;
        // Another transaction takes the row the stamp statement locks first: the statement waits for it. No
        // publisher of the batch returns before that lock is held, so no stamp of it can go out first.
        if (!locked) {
          locked = true;
          await lock(first!);
          lockHeld.resolve();
        } else await lockHeld.promise;
      },
    });
    const passes: number[] = [];
    dispatcher.on('pass', (result) => passes.push(result.outbox.claimed));
    cleanup.push(async () => {
      slow.resolve();
      await dispatcher.stop();
    });
    dispatcher.start();

    while (published.length < 3) await drainContinuations();
    await untilLockWaiters(db().orm);

    // The stall outlasts the lease and the delivery timeout: the loop's next pass claims at the new time.
    clock.advance({ seconds: 60 });
    while (!passes.includes(0) && published.filter((id) => id === second).length < 2) await drainContinuations();

    expect(published.filter((id) => id === second)).toHaveLength(1);
    slow.resolve();
    await release();
    await dispatcher.stop();
    expect(published.filter((id) => id === first)).toHaveLength(1);
  });

  it("'idle' fires only once the rows published before are stamped and their pass reported", async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const [first, second] = await seed(clock, 2);
    const { lock, release } = await locker();
    const published: string[] = [];
    let locked = false;
    const dispatcher = new SagaDispatcher({
      runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }),
      clock,
      logger: silentLogger,
      batchSize: 2,
      concurrency: 2,
      publish: async (envelope) => {
        published.push(envelope.id);
        // Another transaction takes `first` before its publisher returns: the statement stamping it waits for it.
        if (envelope.id === first && !locked) {
          locked = true;
          await lock(first!);
        }
      },
    });
    let reported = 0;
    dispatcher.on('pass', (result) => {
      reported += result.outbox.published;
    });
    // What a listener of 'idle' sees: how many published rows the passes reported so far.
    const atIdle: { published: number; reported: number }[] = [];
    const idle = new Promise<void>((resolve) =>
      dispatcher.on('idle', () => {
        atIdle.push({ published: published.length, reported });
        resolve();
      }),
    );
    cleanup.push(() => dispatcher.stop());
    dispatcher.start();

    while (published.length < 2) await drainContinuations();
    await untilLockWaiters(db().orm);
    // A few round trips: the loop's next pass (nothing left to claim) ends meanwhile.
    for (let n = 0; n < 5; n++) await lockWaiters(db().orm);
    await release();
    await idle;
    await dispatcher.stop();
    expect(atIdle[0]).toEqual({ published: 2, reported: 2 });
    expect((await rowsOf(db().orm).outbox()).filter((row) => [first, second].includes(row.id)).map((row) => row.outcome)).toEqual([
      'published',
      'published',
    ]);
  });
});
