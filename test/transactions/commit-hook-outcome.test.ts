// An application's MikroORM subscriber whose afterTransactionCommit throws (an audit or cache hook: it runs for the
// runtime's own transactions, a group's included). The COMMIT was applied, but em.commit() rejects: the unit must
// not be reported as "nothing was written" (it was), but as an unknown outcome.
import type { EventSubscriber, MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class ThrowAfterCommit implements EventSubscriber {
  armed = false;
  afterTransactionCommit(): void {
    if (!this.armed) return;
    this.armed = false;
    throw new Error('audit hook failed');
  }
}

for (const dialect of DIALECTS) {
  describe(`a subscriber throwing after COMMIT (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
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
    }
  });
}
