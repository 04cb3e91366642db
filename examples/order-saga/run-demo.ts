/**
 * `npm run demo`: the bookstore order saga of the reference article, on an embedded SQLite file
 * (or on PostgreSQL when DATABASE_URL is set), printing a trace and a closing line per scenario.
 */
import { openDemoDatabase } from './database.js';
import { SCENARIOS } from './scenarios.js';

const { orm, where } = await openDemoDatabase();
console.log(`mikro-orm-saga demo: the bookstore order saga on ${where}\n`);
try {
  for (const scenario of SCENARIOS) {
    await scenario(orm);
    console.log('');
  }
} finally {
  await orm.close(true);
}
