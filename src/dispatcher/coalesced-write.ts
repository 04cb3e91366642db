import type { Claim } from '../sql/dispatch-statements.js';

interface Queued {
  readonly claim: Claim;
  readonly resolve: (written: boolean) => void;
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
  constructor(private readonly write: (claims: readonly Claim[]) => Promise<readonly string[]>) {}

  /**
   * Writes the row of `claim` with the others queued now.
   * @returns true when written, false when the claim was lost (the row was taken over or left the pending set).
   * @throws what the statement threw.
   */
  submit(claim: Claim): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
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
        const written = new Set(await this.write(batch.map((queued) => queued.claim)));
        for (const queued of batch) queued.resolve(written.has(queued.claim.id));
      } catch (error) {
        for (const queued of batch) queued.reject(error);
      }
    }
    this.flushing = false;
  }
}
