// em.commit() flushes before it sends COMMIT. What that flush throws (an application's flush subscriber, or MikroORM
// rejecting a change set before any SQL) happened before COMMIT was sent: the transaction is rolled back and nothing
// was written. It must be reported as such (PERSISTENCE_FAILED), never as a COMMIT whose outcome is unknown.
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

for (const dialect of DIALECTS) {
  describe(`a flush failing before COMMIT is sent (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    it('is reported as a failed write with nothing written, not as an unknown COMMIT outcome', async () => {
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
  });
}
