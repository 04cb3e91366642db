// Group commit never takes a unit joined to the application's transaction (PostgreSQL, where a runtime writes up to two
// groups at once): units of the same runtime reaching their write phase together with it are written in groups that
// commit on their own, while the joined unit's write stays in the application's transaction and goes with its
// rollback. Had a group carried it, the group's COMMIT would have made it durable.
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { ArticleSchema } from '../../fixtures/article.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { gatedSaga } from '../../support/gated-saga.js';
import { rowsOf } from '../../support/rows.js';
import { StepGate } from '../../support/step-gate.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

describe('group commit and a joined unit (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga, ArticleSchema]);

  it('units reaching their write with it commit in groups of their own; the joined unit goes with the application’s rollback', async () => {
    const gate = new StepGate(6);
    const saga = gatedSaga(gate);
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
    const keys = Array.from({ length: 6 }, () => uniqueKey('grouped'));
    for (const key of keys) await runtime.handle(saga, { type: 'Start', key });
    const [joinedKey, ...otherKeys] = keys as [string, ...string[]];
    const em = db().orm.em.fork();
    await em.begin();
    const joined = runtime.handle(saga, { type: 'Do', key: joinedKey, gated: true, inc: 1 }, { em });
    const others = otherKeys.map((key) => runtime.handle(saga, { type: 'Do', key, gated: true, inc: 1 }));
    await gate.all.promise;
    gate.go.resolve();
    expect(await joined).toMatchObject({ outcome: 'handled', version: 1 });
    expect(await Promise.all(others)).toMatchObject(otherKeys.map(() => ({ outcome: 'handled', version: 1 })));
    await em.rollback();
    const rows = rowsOf(db().orm);
    expect(await rows.saga(joinedKey)).toMatchObject({ counter: 0, version: 0 });
    for (const key of otherKeys) expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 1 });
  });
});
