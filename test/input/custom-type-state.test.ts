// A state property of a user-defined type (a MikroORM `Type` subclass) holds whatever JavaScript value that type
// converts: the library's state check (src/saga/state-values.ts) judges only the types it knows and leaves
// custom ones to the type and the database, so an array held by a type stored as text is written, not refused.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../src/index.js';
import { LabelListType } from '../fixtures/label-list-type.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class LabelledSaga extends SagaState {
  key!: string;
  labels: string[] = [];
}

const LabelledSagaSchema = defineEntity({
  class: LabelledSaga,
  extends: SagaStateSchema,
  tableName: 'labelled_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    labels: { type: LabelListType, fieldName: 'labels' },
  },
});

type LabelMessage =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Label'; readonly key: string; readonly label: string };

const labelledSaga = defineSaga<LabelledSaga, LabelMessage>({
  name: 'labelled',
  state: LabelledSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Label: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(saga) {
      saga.labels = ['new'];
    },
    Label(saga, message) {
      saga.labels = [...saga.labels, message.label];
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`a state property of a custom type (${dialect})`, () => {
    const db = useDatabase(dialect, [LabelledSagaSchema]);

    it('holds an array through a type stored as text: written on start and on a later step, read back as the array', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [labelledSaga] });
      const key = uniqueKey('labels');
      expect(await runtime.handle(labelledSaga, { type: 'Start', key })).toMatchObject({ outcome: 'started' });
      expect(await runtime.handle(labelledSaga, { type: 'Label', key, label: 'vip' })).toMatchObject({ outcome: 'handled' });
      const stored = await db().orm.em.fork().getConnection().execute('select labels from labelled_saga where key = ?', [key]);
      expect(stored).toEqual([{ labels: 'new,vip' }]);
      const saga = await db().orm.em.fork().findOneOrFail(LabelledSaga, { key });
      expect(saga.labels).toEqual(['new', 'vip']);
      expect(saga.version).toBe(1);
    });
  });
}
