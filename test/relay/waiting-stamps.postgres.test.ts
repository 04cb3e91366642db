// Published stamps that wait (PostgreSQL). A stamp is held up here by a trigger waiting for an advisory lock another
// transaction holds (test/support/row-locks.ts stampGate): a held lock is the gate, no test waits on time.
// The loop's outbox relay does not wait for the statement stamping a batch published before it claims the next: the
// claim of one pass and the stamp of the one before run at once, on two connections. At most one pass's stamps are
// written behind the next: when that statement is slow, the loop waits rather than publish more rows it has not
// stamped, and `runOnce()` resolves only once its rows are stamped.
// A published row whose stamp waits stays held: the lease keeper lets it go only once the stamp is written, so the
// same dispatcher never claims and publishes it again after its lease and delivery timeout passed, and 'idle' fires
// only once the rows published before are stamped.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { drainContinuations } from '../support/flush-hold.js';
import { lockWaiters, stampGate, untilLockWaiters } from '../support/row-locks.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

describe('outbox relay: published stamps that wait (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const cleanup: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0)) await step().catch(() => undefined);
  });

  /** `count` sagas, each with one outbox message, a second apart (so claimed oldest first); their outbox ids. */
  async function seed(clock: FakeClock, count: number): Promise<string[]> {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const ids: string[] = [];
    for (let n = 0; n < count; n++) {
      const key = uniqueKey(`pipe-${n}`);
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [{ op: 'send', message: { type: 'Hello', n } }],
      });
      ids.push(...(await rowsOf(db().orm).outbox(sagaId!)).map((row) => row.id));
      clock.advance({ seconds: 1 });
    }
    return ids;
  }

  /** `ids` in the order the stamp statement locks their rows (saga type, saga id, id; collate "C"). */
  async function inStampOrder(ids: readonly string[]): Promise<string[]> {
    const rows = await outboxRows(ids);
    const c = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
    return rows.sort((a, b) => c(a.sagaType, b.sagaType) || c(a.sagaId, b.sagaId) || c(a.id, b.id)).map((row) => row.id);
  }

  /** The outbox rows of `ids`, in that order. */
  async function outboxRows(ids: readonly string[]) {
    const rows = await rowsOf(db().orm).outbox();
    return ids.map((id) => rows.find((row) => row.id === id)!);
  }

  /**
   * Holds up the published stamps while "locked": another connection's transaction holds the advisory lock a trigger
   * on the stamp waits for (a stamp does not wait for a row lock: test/dispatcher/stamp/locked-row.postgres.test.ts). `lock` closes the
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

  it('claims and publishes the next batch while the stamp of the last waits; no third batch until that stamp is written', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const ids = await seed(clock, 8);
    const { lock, release } = await locker();
    const published: string[] = [];
    const claims: string[][] = [];
    const dispatcher = new SagaDispatcher({
      runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }),
      clock,
      logger: silentLogger,
      batchSize: 2,
      concurrency: 2,
      publish: async (envelope) => {
        published.push(envelope.id);
        // Another transaction takes the first published row: the statement stamping the first batch waits for it.
        if (published.length === 1) await lock(envelope.id);
      },
    });
    dispatcher.on('claimed', (claim) => claims.push([...claim.ids]));
    cleanup.push(() => dispatcher.stop());
    dispatcher.start();

    // A loop that waited for each batch's stamp before claiming again would never publish the second batch.
    while (published.length < 4) await drainContinuations();
    expect(claims).toEqual([ids.slice(0, 2), ids.slice(2, 4)]);
    expect(published).toEqual(ids.slice(0, 4));
    // The held row is not stamped, nor is the second batch: its stamp goes out after the statement that waits.
    const unstamped = (await outboxRows(ids)).filter((row) => row.dispatchedAt === null).map((row) => row.id);
    expect(unstamped).toEqual(expect.arrayContaining([ids[0], ids[2], ids[3]]));

    // The first batch's stamp waits for the row lock; the loop waits for it before it claims a third batch.
    await untilLockWaiters(db().orm);
    for (let n = 0; n < 5; n++) await lockWaiters(db().orm);
    expect(claims).toHaveLength(2);
    expect(published).toHaveLength(4);

    const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
    await release();
    await idle;
    await dispatcher.stop();
    expect(published.sort()).toEqual([...ids].sort()); // each once
    const rows = await outboxRows(ids);
    expect(rows.map((row) => [row.id, row.outcome, row.dispatchedAt !== null])).toEqual(ids.map((id) => [id, 'published', true]));
  });

  it('runOnce() resolves only once the rows it published are stamped', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const ids = await seed(clock, 2);
    const { lock, release } = await locker();
    let locked = false;
    const dispatcher = new SagaDispatcher({
      runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }),
      clock,
      logger: silentLogger,
      publish: async (envelope) => {
        if (!locked) await lock(envelope.id);
        locked = true;
      },
    });
    let settled = false;
    const pass = dispatcher.runOnce().then((result) => {
      settled = true;
      return result;
    });
    await untilLockWaiters(db().orm);
    expect(settled).toBe(false);
    await release();
    expect((await pass).outbox).toMatchObject({ claimed: 2, published: 2 });
    expect((await outboxRows(ids)).map((row) => [row.id, row.outcome])).toEqual(ids.map((id) => [id, 'published']));
  });

  it('does not claim and publish again a row whose stamp is still being written, after its lease time passed', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const [first, second] = await inStampOrder(await seed(clock, 2));
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
    const [first, second] = await inStampOrder(await seed(clock, 2));
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
