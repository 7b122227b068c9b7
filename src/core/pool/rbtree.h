/*
 * pool/rbtree.h: an intrusive red-black tree.  The element embeds its node
 * (first, so that a node is its element) and the tree allocates nothing;
 * the caller links a new node as a leaf where its order puts it, then
 * cp_rb_fix_insert restores the colours.  In-order walks with cp_rb_next /
 * cp_rb_prev; cp_rb_erase unlinks a node.  All static inline: the walks and
 * the inserts sit on the allocators' fast paths.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_RBTREE_H
#define CUPOLA_RBTREE_H

typedef struct cp_rbn {
    struct cp_rbn *p, *l, *r;
    int red;
} cp_rbn;

static inline void cp_rb_rotl(cp_rbn **root, cp_rbn *x)
{
    cp_rbn *y = x->r;
    x->r = y->l;
    if (y->l)
        y->l->p = x;
    y->p = x->p;
    if (!x->p)
        *root = y;
    else if (x == x->p->l)
        x->p->l = y;
    else
        x->p->r = y;
    y->l = x;
    x->p = y;
}

static inline void cp_rb_rotr(cp_rbn **root, cp_rbn *x)
{
    cp_rbn *y = x->l;
    x->l = y->r;
    if (y->r)
        y->r->p = x;
    y->p = x->p;
    if (!x->p)
        *root = y;
    else if (x == x->p->r)
        x->p->r = y;
    else
        x->p->l = y;
    y->r = x;
    x->p = y;
}

/* n was linked as a leaf under parent (or is the root): restore the colours. */
static inline void cp_rb_fix_insert(cp_rbn **root, cp_rbn *n)
{
    n->red = 1;
    while (n->p && n->p->red) {
        cp_rbn *g = n->p->p;
        if (n->p == g->l) {
            cp_rbn *u = g->r;
            if (u && u->red) {
                n->p->red = 0;
                u->red = 0;
                g->red = 1;
                n = g;
            } else {
                if (n == n->p->r) {
                    n = n->p;
                    cp_rb_rotl(root, n);
                }
                n->p->red = 0;
                g->red = 1;
                cp_rb_rotr(root, g);
            }
        } else {
            cp_rbn *u = g->l;
            if (u && u->red) {
                n->p->red = 0;
                u->red = 0;
                g->red = 1;
                n = g;
            } else {
                if (n == n->p->l) {
                    n = n->p;
                    cp_rb_rotr(root, n);
                }
                n->p->red = 0;
                g->red = 1;
                cp_rb_rotl(root, g);
            }
        }
    }
    (*root)->red = 0;
}

static inline cp_rbn *cp_rb_min(cp_rbn *n)
{
    while (n && n->l)
        n = n->l;
    return n;
}

static inline cp_rbn *cp_rb_max(cp_rbn *n)
{
    while (n && n->r)
        n = n->r;
    return n;
}

static inline cp_rbn *cp_rb_next(cp_rbn *n)
{
    cp_rbn *p;
    if (n->r)
        return cp_rb_min(n->r);
    p = n->p;
    while (p && n == p->r) {
        n = p;
        p = p->p;
    }
    return p;
}

static inline cp_rbn *cp_rb_prev(cp_rbn *n)
{
    cp_rbn *p;
    if (n->l)
        return cp_rb_max(n->l);
    p = n->p;
    while (p && n == p->l) {
        n = p;
        p = p->p;
    }
    return p;
}

static inline void cp_rb_transplant(cp_rbn **root, cp_rbn *u, cp_rbn *v)
{
    if (!u->p)
        *root = v;
    else if (u == u->p->l)
        u->p->l = v;
    else
        u->p->r = v;
    if (v)
        v->p = u->p;
}

static inline void cp_rb_erase(cp_rbn **root, cp_rbn *z)
{
    cp_rbn *x, *xp, *y = z;
    int yred = y->red;
    if (!z->l) {
        x = z->r;
        xp = z->p;
        cp_rb_transplant(root, z, z->r);
    } else if (!z->r) {
        x = z->l;
        xp = z->p;
        cp_rb_transplant(root, z, z->l);
    } else {
        y = cp_rb_min(z->r);
        yred = y->red;
        x = y->r;
        if (y->p == z) {
            xp = y;
        } else {
            xp = y->p;
            cp_rb_transplant(root, y, y->r);
            y->r = z->r;
            y->r->p = y;
        }
        cp_rb_transplant(root, z, y);
        y->l = z->l;
        y->l->p = y;
        y->red = z->red;
    }
    if (yred)
        return;
    while (x != *root && (!x || !x->red)) {
        if (x == xp->l) {
            cp_rbn *w = xp->r;
            if (w->red) {
                w->red = 0;
                xp->red = 1;
                cp_rb_rotl(root, xp);
                w = xp->r;
            }
            if ((!w->l || !w->l->red) && (!w->r || !w->r->red)) {
                w->red = 1;
                x = xp;
                xp = x->p;
            } else {
                if (!w->r || !w->r->red) {
                    w->l->red = 0;
                    w->red = 1;
                    cp_rb_rotr(root, w);
                    w = xp->r;
                }
                w->red = xp->red;
                xp->red = 0;
                if (w->r)
                    w->r->red = 0;
                cp_rb_rotl(root, xp);
                x = *root;
                break;
            }
        } else {
            cp_rbn *w = xp->l;
            if (w->red) {
                w->red = 0;
                xp->red = 1;
                cp_rb_rotr(root, xp);
                w = xp->l;
            }
            if ((!w->r || !w->r->red) && (!w->l || !w->l->red)) {
                w->red = 1;
                x = xp;
                xp = x->p;
            } else {
                if (!w->l || !w->l->red) {
                    w->r->red = 0;
                    w->red = 1;
                    cp_rb_rotl(root, w);
                    w = xp->l;
                }
                w->red = xp->red;
                xp->red = 0;
                if (w->l)
                    w->l->red = 0;
                cp_rb_rotr(root, xp);
                x = *root;
                break;
            }
        }
    }
    if (x)
        x->red = 0;
}

#endif /* CUPOLA_RBTREE_H */
