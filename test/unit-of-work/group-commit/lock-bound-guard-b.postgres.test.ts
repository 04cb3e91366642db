// A group of one sends its lock bound as a WITH query of the saga row's statement. A step that changes no column
// writes that row with the version guard: the bound must be in force before the guard waits for a held row too,
// so the unit leaves its group (runs its step again) and commits once the row is free. Held (no defect); it fails
// when the guard drops the bound.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime } from '../../../src/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowLocker, untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

type Msg = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Send'; readonly key: string };
const runs = new Map<string, number>();
/** Resolved when the step of a key runs for the second time (the unit left its group and read again). */
const secondRun = new Map<string, ReturnType<typeof deferred<void>>>();
const saga = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Send: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start: () => undefined,
    Send: (_state, message, ctx) => {
      runs.set(message.key, (runs.get(message.key) ?? 0) + 1);
      if (runs.get(message.key) === 2) secondRun.get(message.key)?.resolve();
      ctx.send({ type: 'Sent' });
    },
  },
});

describe('the lock bound of a group of one on the version guard (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  const locks: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const release of locks.splice(0)) await release().catch(() => undefined);
    for (const orm of opened.splice(0)) await orm.close();
  });

  async function held(key: string) {
    await new SagaRuntime({ em: db().orm.em, sagas: [saga] }).handle(saga, { type: 'Start', key });
    const orm = await db().openAnother({});
    opened.push(orm);
    const { lock, release } = await rowLocker(orm, 'scripted_saga');
    locks.push(release);
    await lock('key', key);
    return release;
  }

  it('a guard on a held row leaves its group after the lock timeout and commits once the row is free', async () => {
    const key = uniqueKey('guard-held');
    const release = await held(key);
    const ranAgain = deferred();
    secondRun.set(key, ranAgain);
    const runtime = new SagaRuntime({
      em: db().orm.em,
      sagas: [saga],
      groupCommit: { lockTimeoutMs: 20 },
      concurrency: { maxAttempts: 1 },
    });
    const unit = runtime.handle(saga, { type: 'Send', key });
    // Ran its step again: it left its group, which only the group's bound (20 ms) makes it do while the row is held.
    await ranAgain.promise;
    await untilLockWaiters(db().orm);
    await release();
    expect(await unit).toMatchObject({ outcome: 'handled', version: 0, attempts: 1, conflicts: 0 });
    const rows = rowsOf(db().orm);
    expect(await rows.saga(key)).toMatchObject({ version: 0 });
  });
});
