// The two examples of docs/integration.md "Handle inside your transaction", copied as they are written there, on every
// database: the article and the start of its review commit together; and `submitArticle`, whose loop runs the whole
// transaction again after CONFLICT_IN_APP_TRANSACTION. Here the first attempt meets a real conflict: another
// connection starts the article's review between the attempt's read and its write.
// SQLite runs in WAL mode here, as in conflicts-in-the-app-transaction.test.ts: in its default rollback-journal mode
// the other connection cannot commit while the attempt holds what it read.
import { defineEntity } from '@mikro-orm/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineSaga, SagaConcurrencyError, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { Article, ArticleSchema, committedArticle } from '../../fixtures/article.js';
import { DIALECTS, isSqlite } from '../../support/databases.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

/** The article's review, as an application would define it. */
class ArticleReview extends SagaState {
  articleId!: string;
  status: string = 'drafted';
  submissions: number = 0;
}

const ArticleReviewSchema = defineEntity({
  class: ArticleReview,
  extends: SagaStateSchema,
  tableName: 'article_review',
  properties: {
    articleId: { type: 'string', length: 100, fieldName: 'article_id', unique: true },
    status: { type: 'string', length: 20, fieldName: 'status' },
    submissions: { type: 'integer', fieldName: 'submissions' },
  },
});

type ReviewMessage =
  | { readonly type: 'ArticleSubmitted'; readonly articleId: string }
  | { readonly type: 'ArticleDrafted'; readonly articleId: string };

/** `submitted`: the ArticleSubmitted step awaits it once, to let another connection commit first. */
function reviewSagaWith(submitted: (review: ArticleReview) => Promise<void>) {
  return defineSaga<ArticleReview, ReviewMessage>({
    name: 'article-review',
    state: ArticleReview,
    correlation: { property: 'articleId', from: (m) => m.articleId },
    startedBy: ['ArticleSubmitted', 'ArticleDrafted'],
    steps: {
      async ArticleSubmitted(review, _message, ctx) {
        await submitted(review);
        review.status = 'submitted';
        review.submissions += 1;
        ctx.schedule('review-reminder', { days: 2 }, { type: 'ArticleSubmitted', articleId: review.articleId });
        ctx.send({ type: 'ReviewRequested', articleId: review.articleId });
      },
      ArticleDrafted(review) {
        review.status = 'drafted';
      },
    },
  });
}

for (const dialect of DIALECTS) {
  describe(`the integration guide's examples of handle() inside your transaction (${dialect})`, () => {
    const db = useDatabase(dialect, [ArticleSchema, ArticleReviewSchema]);
    beforeAll(async () => {
      if (isSqlite(dialect)) await db().orm.em.getConnection().execute('pragma journal_mode = wal');
    });

    it('the article and the start of its review commit together', async () => {
      const orm = db().orm;
      const reviewSaga = reviewSagaWith(async () => undefined);
      const sagas = new SagaRuntime({ em: orm.em, sagas: [reviewSaga] });
      const id = uniqueKey('article');
      const title = 'Sagas in one transaction';
      const requestId = `${id}-request`;

      // As written in docs/integration.md:
      // POST /articles: the article and the start of its review commit together, or not at all.
      await orm.em.transactional(async (em) => {
        em.persist(em.create(Article, { id, title }));
        await sagas.handle(reviewSaga, { type: 'ArticleSubmitted', articleId: id }, { em, messageId: requestId });
      });

      expect(await committedArticle(orm, id)).toMatchObject({ id, title });
      expect(await orm.em.fork().findOne(ArticleReview, { articleId: id })).toMatchObject({
        status: 'submitted',
        submissions: 1,
        version: 0,
      });
    });

    it('submitArticle runs its transaction again after CONFLICT_IN_APP_TRANSACTION, and the second attempt applies the message', async () => {
      const orm = db().orm;
      const id = uniqueKey('retried');
      const title = 'Sagas, retried';
      // The first attempt's step waits while another process drafts the article's review on a connection of its own.
      // (Run from the test, not from the step: inside an em.transactional() callback MikroORM resolves another ORM's
      // `orm.em` of the same context name to the transaction's EntityManager.)
      const entered = deferred();
      const go = deferred();
      let runs = 0;
      const reviewSaga = reviewSagaWith(async () => {
        runs += 1;
        if (runs > 1) return;
        entered.resolve();
        await go.promise;
      });
      const sagas = new SagaRuntime({ em: orm.em, sagas: [reviewSaga] });
      const other = await db().openAnother();
      const otherSagas = new SagaRuntime({ em: other.em, sagas: [reviewSaga] });
      const attempts: unknown[] = [];

      // As written in docs/integration.md (the attempts recorded):
      async function submitArticle(id: string, title: string, requestId: string) {
        for (let attempt = 1; ; attempt++) {
          try {
            return await orm.em.transactional(async (em) => {
              em.persist(em.create(Article, { id, title }));
              return await sagas.handle(reviewSaga, { type: 'ArticleSubmitted', articleId: id }, { em, messageId: requestId });
            });
          } catch (error) {
            attempts.push(error);
            const conflict = error instanceof SagaConcurrencyError && error.code === 'CONFLICT_IN_APP_TRANSACTION';
            if (!conflict || attempt === 5) throw error;
          }
        }
      }

      try {
        const submitted = submitArticle(id, title, `${id}-request`);
        await entered.promise;
        expect(await otherSagas.handle(reviewSaga, { type: 'ArticleDrafted', articleId: id })).toMatchObject({ outcome: 'started' });
        go.resolve();
        const result = await submitted;
        expect(attempts).toMatchObject([{ name: 'SagaConcurrencyError', code: 'CONFLICT_IN_APP_TRANSACTION' }]);
        expect(result).toMatchObject({ outcome: 'handled', version: 1, timersScheduled: 1, messagesSent: 1, attempts: 1 });
      } finally {
        await other.close();
      }
      expect(runs).toBe(2);
      expect(await committedArticle(orm, id)).toMatchObject({ id, title });
      expect(await orm.em.fork().findOne(ArticleReview, { articleId: id })).toMatchObject({
        status: 'submitted',
        submissions: 1,
        version: 1,
      });
      // Submitted again with the same request id: the message was applied, so it is a duplicate.
      const again = await orm.em.transactional((em) =>
        sagas.handle(reviewSaga, { type: 'ArticleSubmitted', articleId: id }, { em, messageId: `${id}-request` }),
      );
      expect(again).toMatchObject({ outcome: 'duplicate', version: 1 });
    });
  });
}
