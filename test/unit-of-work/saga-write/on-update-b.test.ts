// A property's `onUpdate` callback runs each time MikroORM computes a change set for the entity. The write phase's
// own UPDATE (plainRowUpdate) computed the change set, then, when it left the row to MikroORM's flush after all
// (a changed JSON column here), that flush computed it again: `onUpdate` ran once more than without the direct
// UPDATE (a revision counter bumped by 3 per unit of work instead of 2). An entity with an `onUpdate` property is
// now left to MikroORM's flush, as before the direct UPDATE.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { plainRowUpdate } from '../../../src/orm/index.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** An embeddable with a revision counter of its own, bumped the same way (MikroORM walks into embeddables). */
class Audit {
  edits: number = 0;
}

const AuditSchema = defineEntity({
  class: Audit,
  embeddable: true,
  properties: { edits: { type: 'integer', onUpdate: (audit: Audit) => audit.edits + 1 } },
});

/** A saga with a revision counter MikroORM bumps whenever it computes an update, and a JSON column. */
class RevisedSaga extends SagaState {
  key!: string;
  count: number = 0;
  revision: number = 0;
  data: { tags: string[] } = { tags: [] };
  audit: Audit = new Audit();
}

const RevisedSagaSchema = defineEntity({
  class: RevisedSaga,
  extends: SagaStateSchema,
  tableName: 'revised_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    revision: { type: 'integer', fieldName: 'revision', onUpdate: (saga: RevisedSaga) => saga.revision + 1 },
    data: { type: 'json', fieldName: 'data' },
    audit: { kind: 'embedded', entity: () => Audit },
  },
});

type Message =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Inc'; readonly key: string }
  | { readonly type: 'Tag'; readonly key: string; readonly tag: string };

const revisedSaga = defineSaga<RevisedSaga, Message>({
  name: 'revised',
  state: RevisedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key, Tag: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.count++;
    },
    Tag(saga, message) {
      saga.data = { tags: [...saga.data.tags, message.tag] };
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`onUpdate callbacks and the write phase's own UPDATE (${dialect})`, () => {
    const db = useDatabase(dialect, [RevisedSagaSchema, AuditSchema]);
    const read = (key: string) => db().orm.em.fork().findOneOrFail(RevisedSaga, { key });

    it('a unit that MikroORM’s flush writes (JSON) runs onUpdate as often as one of plain columns', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [revisedSaga] });
      const plain = uniqueKey('plain');
      const json = uniqueKey('json');
      await runtime.handle(revisedSaga, { type: 'Start', key: plain });
      await runtime.handle(revisedSaga, { type: 'Start', key: json });
      await runtime.handle(revisedSaga, { type: 'Inc', key: plain });
      await runtime.handle(revisedSaga, { type: 'Tag', key: json, tag: 'a' });
      const [a, b] = [await read(plain), await read(json)];
      expect([a.version, b.version]).toEqual([1, 1]);
      expect(b.revision).toBe(a.revision);
    });

    it('leaves an entity with an onUpdate property to MikroORM’s flush, before computing its change set', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [revisedSaga] });
      const key = uniqueKey('probe');
      await runtime.handle(revisedSaga, { type: 'Start', key });
      const em = db().orm.em.fork();
      const saga = await em.findOneOrFail(RevisedSaga, { key });
      saga.count = 5;
      expect(plainRowUpdate(em, em.getMetadata().find(RevisedSaga as never)!, saga)).toBeUndefined();
      expect(saga.revision).toBe(0);
    });

    // The step phase (run-step.ts) computes the change set to see what changed, which runs onUpdate, and the flush
    // computes it again: onUpdate ran twice per unit of work, where a plain MikroORM flush runs it once. The step
    // phase now puts back what onUpdate assigned (computeChangeSetsOnce).
    it('runs onUpdate once per unit of work, as a plain MikroORM flush', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [revisedSaga] });
      const key = uniqueKey('once');
      await runtime.handle(revisedSaga, { type: 'Start', key });
      await runtime.handle(revisedSaga, { type: 'Inc', key });
      expect((await read(key)).revision).toBe(1);
      await runtime.handle(revisedSaga, { type: 'Inc', key });
      await runtime.handle(revisedSaga, { type: 'Tag', key, tag: 'a' });
      const saga = await read(key);
      expect([saga.count, saga.data.tags, saga.revision, saga.audit.edits, saga.version]).toEqual([2, ['a'], 3, 3, 3]);
    });
  });
}
