// The loop's outbox relay does not wait for the statement stamping a batch published before it claims the next:
// the claim of one pass and the stamp of the one before run at once, on two connections. At most one pass's
// stamps are written behind the next: when that statement is slow (here: held up by a trigger waiting for an advisory
// lock another transaction holds), the loop waits rather than publish more rows it has not stamped. `runOnce()` still resolves
// only once its rows are stamped. A held lock is the gate: no test waits on time.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { drainContinuations } from '../support/flush-hold.js';
import { lockWaiters, stampGate, untilLockWaiters } from '../support/row-locks.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

describe('outbox relay: stamps written behind the next claim (postgresql)', () => {
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

  /** The outbox rows of `ids`, in that order. */
  async function outboxRows(ids: readonly string[]) {
    const rows = await rowsOf(db().orm).outbox();
    return ids.map((id) => rows.find((row) => row.id === id)!);
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
});
