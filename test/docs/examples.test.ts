// The docs' examples are code that is checked: the README's saga definition is test/docs/fixtures/order-saga.ts
// (type-checked by `npm run lint` with the union of messages it sends), its registration example
// test/docs/fixtures/register-app.ts (type-checked), docs/sagas.md's decorator examples the test/fixtures regions,
// and the docs/testing.md snippet is the marked region below (run on both databases, with the clock advanced
// only as far as a timer is due). The first tests keep the docs and the code equal.
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime } from '../../src/index.js';
import type { SagaDefinition } from '../../src/saga/define-saga.js';
import { advanceAndDrain, FakeClock } from '../../src/testing/index.js';
import { DIALECTS } from '../support/databases.js';
import { REPO_ROOT } from '../support/repository.js';
import { useDatabase } from '../support/suite.js';
import { OrderSaga, orderSaga } from './fixtures/order-saga.js';

const read = (path: string) => readFile(resolve(REPO_ROOT, path), 'utf8');

/** The first ```ts block after `heading` in a markdown file. */
async function codeBlockAfter(markdown: string, heading: string): Promise<string> {
  const text = await read(markdown);
  const block = text.slice(text.indexOf(heading)).match(/```ts\n([\s\S]*?)```/);
  if (!text.includes(heading) || !block) throw new Error(`${markdown}: no ts block after '${heading}'`);
  return block[1]!;
}

/** Lines without indentation and blank lines, so an example can sit inside a test body. */
const lines = (code: string) =>
  code
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');

/** An import of the published package, as this repository imports it. */
const local = (line: string) =>
  line
    .replace("from 'mikro-orm-saga/testing'", "from '../../src/testing/index.js'")
    .replace("from 'mikro-orm-saga'", "from '../../src/index.js'")
    .replace("from './order-saga.js'", "from './fixtures/order-saga.js'");

describe('the docs show the code the tests run', () => {
  it("README 'Define a saga' is test/docs/fixtures/order-saga.ts", async () => {
    const readme = await codeBlockAfter('README.md', '## Define a saga');
    const file = (await read('test/docs/fixtures/order-saga.ts')).split('\n').slice(1).join('\n');
    expect(readme).toBe(file.replace("from '../../../src/index.js'", "from 'mikro-orm-saga'"));
  });

  it("README 'Define a saga' types what its saga sends: a step sending another type does not compile (npm run lint)", () => {
    type Sent = typeof orderSaga extends SagaDefinition<OrderSaga, infer _Handled, infer Out> ? Out : never;
    expectTypeOf<Sent>().toEqualTypeOf<{ type: 'ReserveStock'; orderId: string }>();
  });

  it("README 'Add it to your MikroORM app' is test/docs/fixtures/register-app.ts", async () => {
    const readme = await codeBlockAfter('README.md', '## Add it to your MikroORM app');
    const file = await read('test/docs/fixtures/register-app.ts');
    const example = file.slice(file.indexOf('// README begin\n') + '// README begin\n'.length);
    expect(readme).toBe(example.replace("from '../../../src/index.js'", "from 'mikro-orm-saga'"));
  });

  it("README 'Install' gives MikroORM 6's CLI script as examples/existing-app runs it (test/packaging/existing-app.test.ts), as the docs do", async () => {
    const app = JSON.parse(await read('examples/existing-app/package.json')) as { scripts: Record<string, string> };
    const script = app.scripts['mikro-orm']!;
    expect(script).toBe(
      'MIKRO_ORM_CLI_USE_TS_NODE=false MIKRO_ORM_CLI_ALWAYS_ALLOW_TS=true node --import tsx node_modules/@mikro-orm/cli/esm.js',
    );
    const readme = await read('README.md');
    const install = readme.slice(readme.indexOf('## Install'), readme.indexOf('## Define a saga'));
    expect(install).toContain(`"mikro-orm": "${script}"`);
    for (const doc of ['docs/integration.md', 'docs/migrations.md']) expect(await read(doc)).toContain(`"mikro-orm": "${script}"`);
  });

  it("docs/sagas.md 'Mapping the state entity' shows the decorator fixtures test/schema/entity-styles.test.ts runs", async () => {
    const fixtures = {
      'MikroORM 6, decorators': 'test/fixtures/v6/decorators-saga.ts',
      'MikroORM 7, legacy decorators': 'test/fixtures/v7/legacy-decorators-saga.ts',
      'MikroORM 7, ES decorators': 'test/fixtures/v7/es-decorators-saga.ts',
    };
    for (const [label, path] of Object.entries(fixtures)) {
      const doc = await codeBlockAfter('docs/sagas.md', label);
      const file = await read(path);
      const region = file.slice(file.indexOf('// README begin\n') + '// README begin\n'.length, file.indexOf('// README end'));
      expect(doc.trim()).toBe(region.trim().replace("from '../../../src/index.js'", "from 'mikro-orm-saga'"));
    }
  });

  it("docs/integration.md 'ES decorators under vitest' shows the plugin the MikroORM 7 leg runs (test/support/lower-es-decorators.ts)", async () => {
    const doc = await codeBlockAfter('docs/integration.md', '## ES decorators under vitest');
    const file = await read('test/support/lower-es-decorators.ts');
    const region = file.slice(file.indexOf('// docs begin\n') + '// docs begin\n'.length, file.indexOf('// docs end'));
    expect(doc).toBe(region);
  });

  it("docs/testing.md 'Your sagas' is this file's marked region, with its imports", async () => {
    const doc = lines(await codeBlockAfter('docs/testing.md', '## Your sagas'));
    const source = lines(await read('test/docs/examples.test.ts'));
    const region = source.slice(source.indexOf('// docs/testing.md begin') + 1, source.indexOf('// docs/testing.md end'));
    expect(region).toEqual(doc.filter((line) => !line.startsWith('import ')));
    for (const line of doc.filter((l) => l.startsWith('import '))) expect(source).toContain(local(line));
  });
});

for (const dialect of DIALECTS) {
  describe(`the docs/testing.md example (${dialect})`, () => {
    const db = useDatabase(dialect, [OrderSaga]);

    it('the stock timeout fires after a minute, not before, and the outbox is relayed', async () => {
      const orm = db().orm;
      // docs/testing.md begin
      const clock = new FakeClock('2026-01-05T09:00:00Z');
      const runtime = new SagaRuntime({ em: orm.em, sagas: [orderSaga], clock });
      const sent: OutboxEnvelope[] = [];
      const dispatcher = new SagaDispatcher({ runtime, publish: async (envelope) => void sent.push(envelope) });

      await runtime.handle(orderSaga, { type: 'OrderPlaced', orderId: 'o-1' });
      const early = await advanceAndDrain(clock, dispatcher, { seconds: 59 }); // relays ReserveStock; no timer is due yet
      const due = await advanceAndDrain(clock, dispatcher, { seconds: 1 }); // 'stock-timeout' fires
      const saga = await orm.em.fork().findOneOrFail(OrderSaga, { orderId: 'o-1' });
      // early.timers.fired === 0, due.timers.fired === 1, sent[0].type === 'ReserveStock',
      // saga.step === 'Cancelled', saga.completedAt is set
      // docs/testing.md end
      expect(early.timers.fired).toBe(0);
      expect(early.outbox.published).toBe(1);
      expect(due.timers.fired).toBe(1);
      expect(sent.map((envelope) => envelope.type)).toEqual(['ReserveStock']);
      expect(saga.step).toBe('Cancelled');
      expect(saga.completedAt).toEqual(new Date('2026-01-05T09:01:00Z'));
    });
  });
}
