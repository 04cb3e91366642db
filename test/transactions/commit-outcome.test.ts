// What a unit reports when an application's MikroORM subscriber throws around its COMMIT, on every database.
// em.commit() flushes before it sends COMMIT: what that flush throws (a flush subscriber, or MikroORM rejecting a
// change set before any SQL) happened before COMMIT was sent, so nothing was written (PERSISTENCE_FAILED), never an
// unknown outcome. An afterTransactionCommit that throws (an audit or cache hook, run for the runtime's own
// transactions, a group's included) runs after the COMMIT applied: the unit is never reported as "nothing was
// written", but as an unknown outcome (COMMIT_OUTCOME_UNKNOWN).
import type { EntityManager, EventSubscriber, FlushEventArgs, MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** Throws in the second flush of one EntityManager: the unit of work's insert flushes once, em.commit() again. */
class ThrowOnSecondFlush implements EventSubscriber {
  armed = false;
  private readonly flushes = new WeakMap<EntityManager, number>();
  beforeFlush({ em }: FlushEventArgs): void {
    if (!this.armed) return;
    const count = (this.flushes.get(em) ?? 0) + 1;
    this.flushes.set(em, count);
    if (count === 2) {
      this.armed = false;
      throw new Error('flush hook failed');
    }
  }
}

/** Throws in the first afterTransactionCommit after it is armed. */
class ThrowAfterCommit implements EventSubscriber {
  armed = false;
  afterTransactionCommit(): void {
    if (!this.armed) return;
    this.armed = false;
    throw new Error('audit hook failed');
  }
}

for (const dialect of DIALECTS) {
  describe(`a subscriber throwing around COMMIT (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    it('a flush failing before COMMIT is sent is reported as a failed write with nothing written, not as an unknown COMMIT outcome', async () => {
      const orm = await db().openAnother();
      opened.push(orm);
      const hook = new ThrowOnSecondFlush();
      orm.em.getEventManager().registerSubscriber(hook);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
      const key = uniqueKey('flush');
      hook.armed = true;
      const error = (await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] }).then(
        () => undefined,
        (e: unknown) => e,
      )) as (Error & { code?: string; details?: Record<string, unknown> }) | undefined;
      expect(error?.code).toBe('PERSISTENCE_FAILED');
      expect(error?.details).toMatchObject({ operation: 'update', table: 'scripted_saga' });
      expect(error?.message).toMatch(/nothing of it was written/);
      expect(await rowsOf(db().orm).saga(key)).toBeNull();
      // Handled again, the message starts the saga.
      expect(await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] })).toMatchObject({ outcome: 'started' });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 0 });
    });

    for (const groupCommit of [undefined, false] as const) {
      it(`a unit whose COMMIT applied is never reported as "nothing was written" (groupCommit ${String(groupCommit)})`, async () => {
        const orm = await db().openAnother();
        opened.push(orm);
        const hook = new ThrowAfterCommit();
        orm.em.getEventManager().registerSubscriber(hook);
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], ...(groupCommit === false ? { groupCommit } : {}) });
        const key = uniqueKey('hook');
        hook.armed = true;
        const outcome = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] }).then(
          (result) => ({ result }),
          (error: unknown) => ({ error }),
        );
        expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 0 }); // the COMMIT applied
        expect(outcome).toHaveProperty('error');
        const error = (outcome as { error: Error & { code?: string } }).error;
        expect(error.code).toBe('COMMIT_OUTCOME_UNKNOWN');
        expect(error.message).not.toMatch(/nothing (of it )?was written/i);
      });

      it(`an afterTransactionCommit subscriber that throws is what the COMMIT_OUTCOME_UNKNOWN message names first (groupCommit ${String(groupCommit)})`, async () => {
        const orm = await db().openAnother();
        opened.push(orm);
        const hook = new ThrowAfterCommit();
        orm.em.getEventManager().registerSubscriber(hook);
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], ...(groupCommit === false ? { groupCommit } : {}) });
        const key = uniqueKey('hook-message');
        hook.armed = true;
        const error = await runtime.handle(scriptedSaga, { type: 'Start', key }).catch((e: unknown) => e as Error & { code?: string });
        expect(error).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN' });
        expect((error as Error).message).toMatch(
          /^Saga scripted\/[0-9a-f-]+: an afterTransactionCommit subscriber threw Error once COMMIT of the effects of 'Start' was answered, so/,
        );
        expect((error as Error).message).not.toContain('connection');
      });
    }
  });
}
