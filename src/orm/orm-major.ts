import { Utils } from '@mikro-orm/core';

/*
 * MikroORM comes in two majors (6.6 and 7). The unit of work's transactions differ behind one interface, one
 * implementation per major (`unit-transactions.ts`); the few other choices no feature tells apart (the shape of
 * `driverOptions`, the name an entity is looked up by) read the installed major from here. No file of the library
 * outside src/orm checks versions.
 */

/** The major version of the installed `@mikro-orm/core`: 6 or 7. */
export const ORM_MAJOR: 6 | 7 = Number.parseInt(Utils.getORMVersion(), 10) >= 7 ? 7 : 6;
