import type { Claim } from '../sql/dispatch-tables.js';

/**
 * What became of one row's write: written; lost (the row was taken over or left the pending set); busy (another
 * transaction holds the row locked, and the statement did not wait for it: write it again later).
 */
export type WriteOutcome = 'written' | 'lost' | 'busy';

/** What one statement wrote: the ids written, and those it found busy (see {@link WriteOutcome}). */
export interface WriteAnswer {
  readonly written: readonly string[];
  readonly busy?: readonly string[];
}

interface Queued {
  readonly claim: Claim;
  readonly resolve: (outcome: WriteOutcome) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Gathers the token-checked writes of rows that reach the same point together (deliveries starting,
 * messages published) into one statement, as a database groups commits: the first write goes out at once
 * (after the rows queued in the same tick joined it); rows arriving while it runs go out together in the
 * next. Each row still learns whether its own claim held, and a failed statement fails every row it
 * carried, each handled as if written alone.
 */
export class CoalescedWrite {
  private queued: Queued[] = [];
  private flushing = false;

  /** @param write writes the rows of `claims` (still held under their tokens); resolves with the ids written. */
  constructor(private readonly write: (claims: readonly Claim[]) => Promise<WriteAnswer>) {}

  /**
   * Writes the row of `claim` with the others queued now.
   * @returns what became of it ({@link WriteOutcome}).
   * @throws what the statement threw.
   */
  submit(claim: Claim): Promise<WriteOutcome> {
    return new Promise<WriteOutcome>((resolve, reject) => {
      this.queued.push({ claim, resolve, reject });
      if (this.flushing) return;
      this.flushing = true;
      queueMicrotask(() => void this.flush());
    });
  }

  private async flush(): Promise<void> {
    while (this.queued.length > 0) {
      const batch = this.queued;
      this.queued = [];
      try {
        const answer = await this.write(batch.map((queued) => queued.claim));
        const written = new Set(answer.written);
        const busy = new Set(answer.busy ?? []);
        for (const { claim, resolve } of batch) resolve(written.has(claim.id) ? 'written' : busy.has(claim.id) ? 'busy' : 'lost');
      } catch (error) {
        for (const queued of batch) queued.reject(error);
      }
    }
    this.flushing = false;
  }
}
