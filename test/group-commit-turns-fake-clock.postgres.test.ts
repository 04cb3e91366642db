// Break4 (hostile review of c381af1): a unit taking turns for a held row pauses on the runtime's clock. With a
// FakeClock (what tests pass, and what the README tells them to), that pause ends only when the test advances the
// clock: a test that awaits runtime.handle() after the row is released waits forever, with nothing to show why
// (conflict retries pause in real time; the FakeClock's sleepers are not observable). Before c381af1 the unit read
// and ran again at once and committed as soon as the row was free.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime } from '../src/index.js';
import { FakeClock } from '../src/testing/index.js';
import type { Clock } from '../src/time/clock.js';
import { ScriptedSaga } from './fixtures/scripted-saga.js';
import { drainContinuations } from './support/flush-hold.js';
import { rowsOf } from './support/rows.js';
import { uniqueKey, useDatabase } from './support/suite.js';

type Msg = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Do'; readonly key: string; readonly inc: number };

const runs = new Map<string, number>();
const saga = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start: () => undefined,
    Do: (state, message) => {
      if (message.type !== 'Do') return;
      runs.set(message.key, (runs.get(message.key) ?? 0) + 1);
      state.counter += message.inc;
    },
  },
});

async function lockWaiters(orm: MikroORM): Promise<number> {
  const sql = "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
  const [row] = await orm.em.fork().getConnection().execute<{ n: number }[]>(sql);
  return row!.n;
}

describe('group commit turns with a FakeClock (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  const locks: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const release of locks.splice(0)) await release().catch(() => undefined);
    for (const orm of opened.splice(0)) await orm.close();
  });

  async function another(overrides: Parameters<ReturnType<typeof db>['openAnother']>[0] = {}): Promise<MikroORM> {
    const orm = await db().openAnother(overrides);
    opened.push(orm);
    return orm;
  }

  async function locker() {
    const connection = (await another()).em.getConnection();
    const trx = await connection.begin();
    let released: Promise<unknown> | undefined;
    const release = () => {
      released ??= connection.rollback(trx);
      return released;
    };
    locks.push(release);
    const lock = (key: string) => connection.execute('select 1 from "scripted_saga" where "key" = ? for update', [key], 'all', trx);
    return { lock, release };
  }

  it('a unit that took turns commits once its row is released, without the test advancing the FakeClock', async () => {
    const [long, held] = ['long', 'turns'].map((name) => uniqueKey(`fake-turns-${name}`)) as [string, string];
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
    for (const key of [long, held]) await plain.handle(saga, { type: 'Start', key });
    const { lock: lockLong, release: releaseLong } = await locker();
    await lockLong(long);
    const { lock, release } = await locker();
    await lock(held);

    const log: string[] = [];
    const orm = await another({ debug: ['query'], logger: (line: string) => log.push(line) });
    // A FakeClock, seen through a wrapper only to know when the unit paused (the FakeClock does not tell).
    const fake = new FakeClock();
    const pauses: number[] = [];
    const clock: Clock = {
      now: () => fake.now(),
      sleep: (ms, signal) => {
        pauses.push(ms);
        return fake.sleep(ms, signal);
      },
    };
    // The documented defaults for concurrency (baseDelayMs 5, maxDelayMs 250).
    const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], clock, groupCommit: { maxGroups: 1, lockTimeoutMs: 1 } });

    // The unit of `long` waits alone in the only solo slot: the unit of `held` must take turns.
    const waitingLong = runtime.handle(saga, { type: 'Do', key: long, inc: 1 });
    while (!log.some((line) => /rollback/i.test(line)) || (await lockWaiters(db().orm)) < 1) await drainContinuations();
    const unit = runtime.handle(saga, { type: 'Do', key: held, inc: 5 });
    while (pauses.length === 0) await drainContinuations();

    // The row is free now. A real clock would end the pause within maxDelayMs; the FakeClock never moves here.
    await release();
    expect(await unit).toMatchObject({ outcome: 'handled', version: 1, attempts: 1, conflicts: 0 });
    expect(await rowsOf(db().orm).saga(held)).toMatchObject({ counter: 5, version: 1 });
    await releaseLong();
    expect(await waitingLong).toMatchObject({ outcome: 'handled', version: 1 });
  }, 5_000);
});
