"""How good a predictive's uncertainty is, and how to fix its calibration.

    metrics        calibration (ECE, reliability bins), NLL, entropy and mutual information,
                   AUROC, interval coverage, of Monte Carlo predictives
    recalibration  post-hoc temperature and std scaling fitted on held-out data
"""
