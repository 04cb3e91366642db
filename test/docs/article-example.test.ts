// docs/integration.md's article example (test/docs/fixtures/article-review.ts) is the code this test runs, on every
// database: the article and the start of its review commit together; when the application's transaction fails, there
// is neither an article nor a review.
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { DIALECTS } from '../support/databases.js';
import { REPO_ROOT } from '../support/repository.js';
import { useDatabase } from '../support/suite.js';
import { Article, ArticleReview, ArticleReviewSchema, ArticleSchema, articleReview, createArticle } from './fixtures/article-review.js';

describe("docs/integration.md's article example", () => {
  it('is test/docs/fixtures/article-review.ts', async () => {
    const docs = await readFile(resolve(REPO_ROOT, 'docs/integration.md'), 'utf8');
    const heading = '## Start a saga in your own transaction';
    const block = docs.slice(docs.indexOf(heading)).match(/```ts\n([\s\S]*?)```/)?.[1];
    const fixture = await readFile(resolve(REPO_ROOT, 'test/docs/fixtures/article-review.ts'), 'utf8');
    const region = fixture.slice(fixture.indexOf('// docs begin\n') + '// docs begin\n'.length);
    expect(docs).toContain(heading);
    expect(block).toBe(region.replace("from '../../../src/index.js'", "from 'mikro-orm-saga'"));
  });
});

for (const dialect of DIALECTS) {
  describe(`the article example (${dialect})`, () => {
    const db = useDatabase(dialect, [ArticleSchema, ArticleReviewSchema]);
    const setup = () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const sagas = new SagaRuntime({ em: db().orm.em, sagas: [articleReview], clock });
      const published: OutboxEnvelope[] = [];
      const dispatcher = new SagaDispatcher({ runtime: sagas, publish: async (e) => void published.push(e), logger: silentLogger });
      return { sagas, dispatcher, published };
    };

    it('POST /article writes the article and starts its review once; the review asks for a reviewer', async () => {
      const { sagas, dispatcher, published } = setup();
      await createArticle(db().orm.em.fork(), sagas, { id: 'a-1', title: 'Sagas in one transaction' });
      await drainDueTimers(dispatcher);
      const em = db().orm.em.fork();
      expect(await em.findOne(Article, 'a-1')).toMatchObject({ title: 'Sagas in one transaction' });
      expect(await em.findOne(ArticleReview, { articleId: 'a-1' })).toMatchObject({ status: 'awaiting-review', version: 0 });
      expect(published.map((e) => e.type).sort()).toEqual(['ArticleCreated', 'ReviewRequested']);
    });

    it('a transaction that fails (the article exists already) leaves no second article, no staged delivery, no message', async () => {
      const { sagas, dispatcher, published } = setup();
      await createArticle(db().orm.em.fork(), sagas, { id: 'a-2', title: 'First' });
      await drainDueTimers(dispatcher);
      published.length = 0;
      await expect(createArticle(db().orm.em.fork(), sagas, { id: 'a-2', title: 'Again' })).rejects.toThrow();
      const drained = await drainDueTimers(dispatcher);
      expect(drained.inbox.claimed + drained.outbox.claimed).toBe(0);
      expect(published).toEqual([]);
      expect(await db().orm.em.fork().findOne(Article, 'a-2')).toMatchObject({ title: 'First' });
    });
  });
}
